{ "content" => [{ "type" => "text", "text" => "failing_job failed on purpose" }], "isError" => true }
