rows(5).sum { _1["id"] }
