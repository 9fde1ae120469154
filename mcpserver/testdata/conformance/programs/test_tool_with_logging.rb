puts "Tool execution started"
puts "Tool processing data"
puts "Tool execution completed"
"Tool with logging executed successfully"
