roots = mcp_ask({ "client_roots" => { "method" => "roots/list", "params" => {} } })["client_roots"]["roots"]
"The client's roots: " + roots.map { |r| "#{r["name"]} (#{r["uri"]})" }.join(", ")
