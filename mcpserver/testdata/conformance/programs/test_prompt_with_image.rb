[
  { "role" => "user", "content" => { "type" => "image", "data" => "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "mimeType" => "image/png" } },
  { "role" => "user", "content" => { "type" => "text", "text" => "Please analyze the image above." } }
]
