[{ "role" => "user", "content" => { "type" => "text", "text" => "Prompt with arguments: arg1=#{ARGS["arg1"]}, arg2=#{ARGS["arg2"]}" } }]
