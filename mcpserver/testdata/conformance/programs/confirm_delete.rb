r = mcp_ask({ "confirm" => { "method" => "elicitation/create", "params" => {
  "message" => "Delete #{ARGS["filename"]}?",
  "requestedSchema" => { "type" => "object", "properties" => { "confirm" => { "type" => "boolean" } }, "required" => ["confirm"] },
} } })["confirm"]
r["action"] == "accept" && r.dig("content", "confirm") ? "Deleted #{ARGS["filename"]}" : "Kept #{ARGS["filename"]}"
