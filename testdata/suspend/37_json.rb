require "json"
data = JSON.parse(JSON.generate(rows(3)))
JSON.generate(data.map { |r| r.merge("d" => double(r["id"])) })
