caps = mcp_client_capabilities
asks = {}
if caps.key?("elicitation")
  asks["user_name"] = { "method" => "elicitation/create", "params" => {
    "message" => "What is your name?",
    "requestedSchema" => { "type" => "object", "properties" => { "name" => { "type" => "string" } }, "required" => ["name"] },
  } }
end
if caps.key?("sampling")
  asks["greeting"] = { "method" => "sampling/createMessage", "params" => {
    "messages" => [{ "role" => "user", "content" => { "type" => "text", "text" => "Generate a greeting" } }],
    "maxTokens" => 50,
  } }
end
asks["client_roots"] = { "method" => "roots/list", "params" => {} } if caps.key?("roots")
next_answers = asks.empty? ? {} : mcp_ask(asks)
"asked #{next_answers.keys.sort.join(", ")}"
