# Code mode: reason over host data through the exposed tools in one eval.
shipped = orders.select { |o| o["status"] == "shipped" }
total = shipped.sum { |o| o["total"] }.round(2)
add_note("shipped revenue is #{total} over #{shipped.size} orders")
{ "shipped_total" => total, "largest" => shipped.max_by { |o| o["total"] }["id"] }
