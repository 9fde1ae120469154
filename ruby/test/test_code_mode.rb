# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"

class CodeModeTest < Minitest::Test
  include ExecutorHarness

  DOCS = {
    orders: { description: "The customer's orders, newest first.",
              params: [{ name: "status", description: "only orders in this status", schema: { type: "string" }, keywords: true }],
              example: 'orders(status: "shipped")' },
    customer: { description: "One customer by id.", params: [{ name: "id", schema: { type: "integer" }, required: true }] },
  }.freeze

  def test_description_and_result_from_the_executor
    tools = DeskTools.new
    sb = sandbox(tools, only: %i[orders customer change_plan], tool_calls: 20).require_approval(:change_plan) { true }
    tool = Glovebox::CodeMode.new(sb, instructions: "You answer for customer 42.", docs: DOCS)
    assert_equal "run_ruby", tool.name
    assert_match(/Runs a Ruby program in a sandbox/, tool.description)
    assert_match(/The customer's orders, newest first/, tool.description)
    assert_match(/You answer for customer 42\./, tool.description)
    assert_match(/20 function calls/, tool.description)
    assert_equal ["code"], tool.parameters["required"]
    assert_equal({ name: tool.name, description: tool.description, parameters: tool.parameters }, tool.to_h)

    out = JSON.parse(tool.call(code: 'puts "looking"; orders(status: "shipped").map { _1["id"] }'))
    assert_equal "ok", out["status"]
    assert_equal [1], out["value"]
    assert_equal "looking\n", out["stdout"]
    assert_equal "orders", out["tool_calls"][0]["name"]
    assert_equal "ok", tool.last_result.status

    out = JSON.parse(tool.call(code: "customer(7)"))
    assert_equal "error", out["status"]
    assert_equal "Glovebox::NotFound", out.dig("error", "class")
  end

  def test_session_tool_is_described_as_one
    sandbox(DeskTools.new, only: %i[orders]).session do |s|
      tool = Glovebox::CodeMode.new(s, name: "desk")
      assert_equal "desk", tool.name
      assert_match(/All calls share one Ruby VM/, tool.description)
      tool.call(code: "x = 41")
      assert_equal 42, JSON.parse(tool.call(code: "x + 1"))["value"]
    end
  end

  def test_bad_name_refused
    e = assert_raises(Glovebox::APIError) { Glovebox::CodeMode.new(sandbox, name: "no spaces") }
    assert_equal "bad_request", e.code
  end
end
