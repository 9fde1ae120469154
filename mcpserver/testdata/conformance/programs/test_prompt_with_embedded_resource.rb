[
  { "role" => "user", "content" => { "type" => "resource", "resource" => { "uri" => ARGS["resourceUri"], "mimeType" => "text/plain", "text" => "Embedded resource content for testing." } } },
  { "role" => "user", "content" => { "type" => "text", "text" => "Please process the embedded resource above." } }
]
