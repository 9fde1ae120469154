# The README's first example: a tool of yours, Ruby a model might
# write, and the answer. Embedded: no executor, nothing else to start.
#
#   gem install glovebox && ruby first.rb
require "glovebox"

class Shop
  def orders = [{ id: 1, total: 30.5, status: :shipped }, { id: 2, total: 12, status: :delivered }]
end

sandbox = Glovebox::Sandbox.new(tools: Shop.new)
r = sandbox.eval('orders.select { _1["status"] == "shipped" }.sum { _1["total"] }')
p r.status, r.value, r.tool_calls.map(&:name) # "ok", 30.5, ["orders"]
