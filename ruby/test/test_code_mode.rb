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

  class NoteTools
    def notes(note:, pinned: false) = [note, pinned]
    def tag(ticket, *labels) = [ticket, labels]
    def search(query, limit = 10) = [query, limit]
  end

  # Without docs, a function is described by its Ruby signature: the
  # example for a keyword-only method is a keyword call, and a model
  # that follows it gets an answer.
  def test_examples_follow_ruby_signatures
    sb = sandbox(NoteTools.new)
    tool = Glovebox::CodeMode.new(sb)
    assert_match(/^Example: notes\(note: nil\)$/, tool.description)
    assert_match(/^Example: tag\(nil, nil\)$/, tool.description)
    assert_match(/^- labels: any value; any number of them$/, tool.description)
    assert_match(/^- limit: any value; optional$/, tool.description)
    example = tool.description[/^Example: (notes\(.*\))$/, 1]
    out = JSON.parse(tool.call(code: example.sub("nil", '"call back"')))
    assert_equal "ok", out["status"], out.inspect
    assert_equal ["call back", false], out["value"]
  end

  def test_bad_name_refused
    e = assert_raises(Glovebox::APIError) { Glovebox::CodeMode.new(sandbox, name: "no spaces") }
    assert_equal "bad_request", e.code
  end
end
