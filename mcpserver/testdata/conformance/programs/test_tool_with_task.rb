r = mcp_ask({ "user_name" => { "method" => "elicitation/create", "params" => {
  "message" => "What is your name?",
  "requestedSchema" => { "type" => "object", "properties" => { "name" => { "type" => "string" } }, "required" => ["name"] },
} } })["user_name"]
"Hello, #{r.dig("content", "name")}!"
