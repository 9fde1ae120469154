puts "a log line, sent only to a client that asked for a log level"
"logged"
