# frozen_string_literal: true

# Code mode with a real model over plain HTTP (no LLM gem needed): the
# model gets one tool, run_ruby, whose description and results come from
# the executor (glovebox's own code mode), and answers a support question
# by writing Ruby against the tools below.
#
#   ANTHROPIC_API_KEY=... GLOVEBOX_URL=https://127.0.0.1:8443 GLOVEBOX_TOKEN=$(cat app.token) \
#   GLOVEBOX_CA=tls/cert.pem ruby -I lib examples/model.rb
#
# Without ANTHROPIC_API_KEY it prints the tool it would send and runs one
# program as the model might have written it.
require "glovebox"
require "json"
require "net/http"

class Orders
  def orders = [{ "id" => 1, "total" => 30.5, "status" => "shipped" }, { "id" => 2, "total" => 12, "status" => "delivered" }]
end

sandbox = Glovebox::Sandbox.new(tools: Orders.new, executor: ENV.fetch("GLOVEBOX_URL", "https://127.0.0.1:8443"),
                                token: ENV.fetch("GLOVEBOX_TOKEN"), ca_file: ENV["GLOVEBOX_CA"])
tool = Glovebox::CodeMode.new(sandbox, instructions: "You help customer 7 of a coffee shop.",
                                       docs: { orders: { description: "The customer's orders (id, total, status)." } })

key = ENV["ANTHROPIC_API_KEY"]
unless key
  puts "tool #{tool.name}: #{tool.description.lines.first}"
  puts tool.call(code: 'orders.select { _1["status"] == "shipped" }.sum { _1["total"] }')
  exit
end

uri = URI("https://api.anthropic.com/v1/messages")
messages = [{ role: "user", content: "How much is still on its way to me?" }]
8.times do
  req = Net::HTTP::Post.new(uri, "content-type" => "application/json", "x-api-key" => key, "anthropic-version" => "2023-06-01")
  req.body = JSON.generate(model: ENV.fetch("MODEL", "claude-sonnet-4-5"), max_tokens: 1024, messages: messages,
                           tools: [{ name: tool.name, description: tool.description, input_schema: tool.parameters }])
  res = Net::HTTP.start(uri.host, uri.port, use_ssl: true) { |h| h.request(req) }
  abort "model API: #{res.code} #{res.body}" unless res.is_a?(Net::HTTPSuccess)
  reply = JSON.parse(res.body)
  messages << { role: "assistant", content: reply["content"] }
  calls = reply["content"].select { _1["type"] == "tool_use" }
  if calls.empty?
    puts reply["content"].filter_map { _1["text"] }.join
    break
  end
  messages << { role: "user", content: calls.map do |c|
    puts "model's code: #{c.dig("input", "code")}"
    out = tool.call(code: c.dig("input", "code").to_s)
    { type: "tool_result", tool_use_id: c["id"], content: out, is_error: !tool.last_result.ok? }
  end }
end
