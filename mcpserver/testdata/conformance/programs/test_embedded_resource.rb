{ "content" => [{ "type" => "resource", "resource" => { "uri" => "test://embedded-resource", "mimeType" => "text/plain", "text" => "This is an embedded resource content." } }] }
