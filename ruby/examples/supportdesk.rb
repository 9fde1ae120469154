# frozen_string_literal: true

# The support desk's first questions, from Ruby, against a local executor.
# The data stays in this process: the guest's Ruby runs on the executor and
# calls these methods back.
#
#   GLOVEBOX_URL=https://127.0.0.1:8443 GLOVEBOX_TOKEN=$(cat app.token) \
#   GLOVEBOX_CA=tls/cert.pem ruby -I lib examples/supportdesk.rb
require "glovebox"

# A plain object standing in for the app's models, scoped to one customer.
class SupportTools
  class NotFound < Glovebox::ToolError; end

  ORDERS = [
    { id: 101, customer: 7, status: "delivered", total: 42.0, items: ["kettle"] },
    { id: 102, customer: 7, status: "shipped", total: 19.5, items: ["filters", "mugs"] },
    { id: 103, customer: 7, status: "delivered", total: 88.25, items: ["grinder"] },
    { id: 104, customer: 9, status: "delivered", total: 5.0, items: ["not yours"] },
  ].freeze

  def initialize(customer_id) = @customer = customer_id

  def orders(status: nil)
    mine = ORDERS.select { |o| o[:customer] == @customer }
    status ? mine.select { |o| o[:status] == status } : mine
  end

  def order(id)
    orders.find { |o| o[:id] == id } || raise(NotFound, "no order #{id} for this customer")
  end

  def change_plan(plan) = "plan changed to #{plan}"

  # Only these reach the sandbox, whatever else is public.
  private def glovebox_tool_methods = %i[orders order change_plan]
end

sandbox = Glovebox::Sandbox.new(
  tools: SupportTools.new(7),
  executor: ENV.fetch("GLOVEBOX_URL", "https://127.0.0.1:8443"),
  token: ENV.fetch("GLOVEBOX_TOKEN"), ca_file: ENV["GLOVEBOX_CA"],
  timeout: 5, tool_calls: 50,
  error_sanitizer: ->(_name, e) { e.is_a?(Glovebox::ToolError) ? e.message : "internal error" }
)
sandbox.require_approval(:change_plan) { |_name, args, _kw| args.first != "free" } # a person would decide here

questions = {
  "How many orders were delivered?" => 'orders(status: "delivered").size',
  "What did I spend in total?" => "orders.sum { _1['total'] }.round(2)",
  "What was in order 102?" => 'order(102)["items"].join(", ")',
  "And order 104?" => 'begin; order(104); rescue Glovebox::NotFound => e; "sorry: #{e.message}"; end',
  "Move me to the free plan" => 'begin; change_plan("free"); rescue Glovebox::ToolDenied; "that needs a person"; end',
}
questions.each do |q, code|
  r = sandbox.eval(code)
  puts "Q: #{q}"
  puts "   ruby: #{code}"
  puts "   #{r.status}: #{r.value.inspect}  (tool calls: #{r.tool_calls.map { "#{_1.name}:#{_1.outcome}" }.join(" ")})"
end
