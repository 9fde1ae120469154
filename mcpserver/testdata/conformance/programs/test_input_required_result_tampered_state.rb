r = mcp_ask({ "confirm" => { "method" => "elicitation/create", "params" => {
  "message" => "Please confirm",
  "requestedSchema" => { "type" => "object", "properties" => { "ok" => { "type" => "boolean" } }, "required" => ["ok"] },
} } })["confirm"]
# Reaching this line means the requestState opened, passed its integrity
# check and continued this program where it paused.
"state-ok: confirmed=#{r.dig("content", "ok").inspect}"
