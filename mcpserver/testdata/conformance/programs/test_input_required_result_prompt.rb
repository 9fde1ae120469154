r = mcp_ask({ "user_context" => { "method" => "elicitation/create", "params" => {
  "message" => "What context should the prompt use?",
  "requestedSchema" => { "type" => "object", "properties" => { "context" => { "type" => "string" } }, "required" => ["context"] },
} } })["user_context"]
"Use this context: #{r.dig("content", "context")}"
