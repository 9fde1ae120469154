{ "content" => [
  { "type" => "text", "text" => "Multiple content types test:" },
  { "type" => "image", "data" => "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "mimeType" => "image/png" },
  { "type" => "resource", "resource" => { "uri" => "test://mixed-content-resource", "mimeType" => "application/json", "text" => '{"test":"data","value":123}' } }
] }
