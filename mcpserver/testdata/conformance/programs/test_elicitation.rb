schema = {
  "type" => "object",
  "properties" => {
    "username" => { "type" => "string", "description" => "User's response" },
    "email" => { "type" => "string", "description" => "User's email address" },
  },
  "required" => ["username", "email"],
}
r = mcp_ask({ "user" => { "method" => "elicitation/create", "params" => { "message" => ARGS["message"], "requestedSchema" => schema } } })["user"]
"User response: action=#{r["action"]}, content=#{JSON.generate(r["content"] || {})}"
