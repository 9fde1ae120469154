begin
  boom("x")
rescue Glovebox::Boom => e
  "rescued #{e.message} #{e.class.ancestors.include?(Glovebox::ToolError)}"
end
