r = mcp_ask({ "answer" => { "method" => "sampling/createMessage", "params" => {
  "messages" => [{ "role" => "user", "content" => { "type" => "text", "text" => ARGS["prompt"] } }],
  "maxTokens" => 100,
} } })["answer"]
content = r["content"]
content = content.first if content.is_a?(Array)
"LLM response: #{content && content["text"]}"
