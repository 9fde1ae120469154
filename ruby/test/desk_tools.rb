# frozen_string_literal: true

# A plain object standing in for an app's models.
class DeskTools
  class NotFound < Glovebox::ToolError; end

  attr_reader :changed

  def initialize = @changed = []

  def orders(status: nil)
    all = [{ id: 1, total: 30.5, status: :shipped }, { id: 2, total: 99, status: :pending }]
    status ? all.select { |o| o[:status].to_s == status } : all
  end

  def customer(id)
    raise NotFound, "no customer #{id}" unless id == 42

    { "id" => 42, "name" => "Ada", "balance" => 2**70 }
  end

  def explode = raise("SELECT * FROM secrets WHERE token='abc' failed")

  def change_plan(plan)
    @changed << plan
    "plan is #{plan}"
  end

  def blob = "\x00\xffbytes".b

  def echo(v) = v

  def handle = Object.new

  def glovebox_tool_methods = %i[orders customer explode change_plan blob echo handle]

  def reset! = @changed.clear # public, but outside the ceiling
end

# Checks shared by the embedded and the executor's suspend tests.
module ContinuationChecks
  # A continuation's transcript lists the paused call however it was
  # answered: run here (approve), denied with the reason, or answered
  # with the reply; the calls after it follow. sb pauses at change_plan.
  def check_continuation_transcript(sb)
    code = 'orders.size; x = begin; change_plan("pro"); rescue Glovebox::ToolDenied => e; e.message; end; [x, echo(3)]'
    seen = {}
    { approve: true, deny: "a person said no", reply: { "done" => true } }.each do |how, answer|
      r = sb.eval(code)
      assert_equal %w[orders], r.tool_calls.map(&:name)
      r2 = sb.continue(r.key, how => answer)
      assert_equal "ok", r2.status, r2.error.inspect
      assert_equal %w[change_plan echo], r2.tool_calls.map(&:name), how
      c = r2.tool_calls.first
      assert_equal [["pro"], {}], [c.args, c.kwargs]
      seen[how] = [c.outcome, c.result, c.error]
    end
    assert_equal({ approve: ["ok", "plan is pro", ""], deny: ["denied", nil, "a person said no"],
                   reply: ["ok", { "done" => true }, ""] }, seen)
  end
end
