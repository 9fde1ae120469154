schema = {
  "type" => "object",
  "properties" => {
    "name" => { "type" => "string", "default" => "John Doe" },
    "age" => { "type" => "integer", "default" => 30 },
    "score" => { "type" => "number", "default" => 95.5 },
    "status" => { "type" => "string", "enum" => ["active", "inactive", "pending"], "default" => "active" },
    "verified" => { "type" => "boolean", "default" => true },
  },
}
r = mcp_ask({ "defaults" => { "method" => "elicitation/create", "params" => { "message" => "Please review the defaults", "requestedSchema" => schema } } })["defaults"]
"Elicitation completed: action=#{r["action"]}, content=#{JSON.generate(r["content"] || {})}"
