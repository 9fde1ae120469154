def ask_one(key, message, field)
  mcp_ask({ key => { "method" => "elicitation/create", "params" => {
    "message" => message,
    "requestedSchema" => { "type" => "object", "properties" => { field => { "type" => "string" } }, "required" => [field] },
  } } })[key].dig("content", field)
end
name = ask_one("step1", "Step 1: What is your name?", "name")
color = ask_one("step2", "Step 2: What is your favorite color?", "color")
"#{name} likes #{color}"
