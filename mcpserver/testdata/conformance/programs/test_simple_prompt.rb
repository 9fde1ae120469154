[{ "role" => "user", "content" => { "type" => "text", "text" => "This is a simple prompt for testing." } }]
