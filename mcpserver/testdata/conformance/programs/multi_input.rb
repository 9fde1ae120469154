schema = ->(prop, type) { { "type" => "object", "properties" => { prop => { "type" => type } }, "required" => [prop] } }
a = mcp_ask({
  "name" => { "method" => "elicitation/create", "params" => { "message" => "Your name?", "requestedSchema" => schema.("name", "string") } },
  "confirm" => { "method" => "elicitation/create", "params" => { "message" => "Go ahead?", "requestedSchema" => schema.("confirm", "boolean") } },
})
"name: #{a["name"].dig("content", "name")}, confirmed: #{a["confirm"].dig("content", "confirm")}"
