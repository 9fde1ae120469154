r = mcp_ask({ "capital_question" => { "method" => "sampling/createMessage", "params" => {
  "messages" => [{ "role" => "user", "content" => { "type" => "text", "text" => "What is the capital of France?" } }],
  "maxTokens" => 100,
} } })["capital_question"]
content = r["content"]
content = content.first if content.is_a?(Array)
"The model said: #{content && content["text"]}"
