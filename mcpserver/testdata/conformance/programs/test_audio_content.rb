{ "content" => [{ "type" => "audio", "data" => "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=", "mimeType" => "audio/wav" }] }
