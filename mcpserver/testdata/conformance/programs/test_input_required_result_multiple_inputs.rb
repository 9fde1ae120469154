a = mcp_ask({
  "user_name" => { "method" => "elicitation/create", "params" => {
    "message" => "What is your name?",
    "requestedSchema" => { "type" => "object", "properties" => { "name" => { "type" => "string" } }, "required" => ["name"] },
  } },
  "greeting" => { "method" => "sampling/createMessage", "params" => {
    "messages" => [{ "role" => "user", "content" => { "type" => "text", "text" => "Generate a greeting" } }],
    "maxTokens" => 50,
  } },
  "client_roots" => { "method" => "roots/list", "params" => {} },
})
greeting = a["greeting"]["content"]
greeting = greeting.first if greeting.is_a?(Array)
"#{greeting && greeting["text"]} #{a["user_name"].dig("content", "name")}; roots: #{a["client_roots"]["roots"].size}"
