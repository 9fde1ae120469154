# JSON round trip: generate a document of nested orders (strings,
# integers, floats, booleans, nil, arrays and hashes) and parse it back,
# n times; the result is the bytes generated and a field read back.
require "json"

def bench(n)
  orders = Array.new(50) do |i|
    { "id" => i, "customer" => "customer #{i}", "paid" => i.even?, "note" => nil,
      "total" => i * 3.25, "lines" => Array.new(5) { |j| { "sku" => "SKU-#{i}-#{j}", "qty" => j + 1, "price" => 9.99 + j } } }
  end
  bytes = 0
  last = nil
  n.times do
    s = JSON.generate({ "orders" => orders, "count" => orders.size })
    bytes += s.bytesize
    last = JSON.parse(s)
  end
  "#{bytes}:#{last["orders"][49]["lines"][4]["sku"]}"
end
