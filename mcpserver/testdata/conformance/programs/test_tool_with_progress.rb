[0, 50, 100].each_with_index do |n, i|
  sleep 0.05 if i > 0
  mcp_progress(n, 100, "step #{i + 1} of 3")
end
"progress reported"
