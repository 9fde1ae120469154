{ "content" => [{ "type" => "text", "text" => "This tool intentionally returns an error for testing" }], "isError" => true }
