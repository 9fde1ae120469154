id = ARGS["uri"][%r{\Atest://template/([^/]+)/data\z}, 1]
raise ArgumentError, "not a test://template/{id}/data URI: #{ARGS["uri"]}" unless id
{ "text" => JSON.generate({ "id" => id, "templateTest" => true, "data" => "Data for ID: #{id}" }) }
