# A tool's error is an ordinary, rescuable Ruby exception.
begin
  order(42)
rescue Glovebox::ToolError => e
  puts "tool said: #{e.message}"
end
order(3)["total"]
