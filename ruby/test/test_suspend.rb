# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"

# Evals that pause at a tool call and are continued by key, and sessions
# kept across an executor restart: against an executor with --state-key.
class SuspendTest < Minitest::Test
  include ExecutorHarness
  include ContinuationChecks

  def paused_sandbox(tools = DeskTools.new)
    Glovebox::Sandbox.new(tools: tools, client: state_executor.client, suspend: [:change_plan])
  end

  def start_paused(sb, code = 'print "before "; change_plan("pro")')
    r = sb.eval(code)
    assert_equal "suspended", r.status, r.error.inspect
    assert r.suspended?
    r
  end

  def test_approve_runs_the_tool_with_output_kept
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    r = start_paused(sb, 'print "before "; x = change_plan("pro"); print "after"; x')
    assert_equal "before ", r.stdout
    assert_equal "change_plan", r.pending.name
    assert_equal ["pro"], r.pending.args
    assert_empty tools.changed # not run while paused
    r2 = sb.continue(r.key, approve: true)
    assert_equal "ok", r2.status, r2.error.inspect
    assert_equal "plan is pro", r2.value
    assert_equal ["pro"], tools.changed
    assert_equal "before after", r2.stdout # whole across the pause
    refute_equal r.key, r2.key
  end

  def test_deny_raises_tool_denied_in_the_guest
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    r = start_paused(sb, 'begin; change_plan("pro"); rescue Glovebox::ToolDenied => e; "denied: #{e.message}"; end')
    r2 = sb.continue(r.key, deny: "a person said no")
    assert_equal "ok", r2.status, r2.error.inspect
    assert_match(/a person said no/, r2.value)
    assert_empty tools.changed
  end

  def test_reply_answers_for_the_tool
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    r = start_paused(sb, 'change_plan("pro") + [1]')
    r2 = sb.continue(r.key, reply: { "done" => true }.then { [_1] })
    assert_equal "ok", r2.status, r2.error.inspect
    assert_equal [{ "done" => true }, 1], r2.value
    assert_empty tools.changed
  end

  def test_continuation_transcript_lists_the_paused_call = check_continuation_transcript(paused_sandbox)

  def test_second_continue_is_refused
    sb = paused_sandbox
    r = start_paused(sb)
    assert_equal "ok", sb.continue(r.key, reply: "fine").status
    e = assert_raises(Glovebox::AlreadyContinued) { sb.continue(r.key, approve: true) }
    assert_equal "already_continued", e.code
    assert_kind_of Glovebox::RunError, e
  end

  def test_continue_from_a_new_sandbox_and_pause_again
    r = start_paused(paused_sandbox, 'a = change_plan("pro"); b = change_plan("max"); [a, b]')
    tools = DeskTools.new
    other = paused_sandbox(tools) # as another process would: only the key travels
    r2 = other.continue(r.key, approve: true)
    assert_equal "suspended", r2.status, r2.error.inspect
    assert_equal ["max"], r2.pending.args
    r3 = other.continue(r2.key, approve: true)
    assert_equal "ok", r3.status, r3.error.inspect
    assert_equal ["plan is pro", "plan is max"], r3.value
    assert_equal %w[pro max], tools.changed
  end

  def test_continue_needs_one_answer
    assert_raises(ArgumentError) { paused_sandbox.continue("e-x") }
    assert_raises(ArgumentError) { paused_sandbox.continue("e-x", approve: true, deny: "no") }
  end

  def test_continue_of_nothing_paused_is_not_found
    e = assert_raises(Glovebox::RunError) { paused_sandbox.continue("e-#{"0" * 32}", approve: true) }
    assert_equal "not_found", e.code
    refute_kind_of Glovebox::AlreadyContinued, e
  end

  def test_without_state_key_refused
    e = assert_raises(Glovebox::APIError) { sandbox(DeskTools.new, suspend: [:change_plan]).eval("1") }
    assert_equal "bad_request", e.code
  end

  def test_session_pauses_and_goes_on_after_continue
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    s = sb.session
    assert_equal "ok", s.eval("$before = 1").status
    r = s.eval('$during = 2; change_plan("pro")')
    assert_equal "suspended", r.status, r.error.inspect
    assert_equal "change_plan", r.pending.name
    e = assert_raises(Glovebox::RunError) { s.eval("$before") }
    assert_equal "session_paused", e.code
    r2 = sb.continue(r.key, approve: true)
    assert_equal "ok", r2.status, r2.error.inspect
    assert_equal "plan is pro", r2.value
    assert_equal ["pro"], tools.changed
    assert_equal [1, 2], s.eval("[$before, $during]").value
    assert_equal 3, s.eval("1 + 2", suspend: []).value
  ensure
    s&.close
  end

  def test_session_survives_restart
    sb = Glovebox::Sandbox.new(client: state_executor.client)
    s = sb.session
    assert_equal "ok", s.eval("$kept = 41; def bump = $kept + 1").status
    state_executor.stop
    state_executor.start
    r = s.eval("bump")
    assert_equal "ok", r.status, r.error.inspect
    assert_equal 42, r.value
    refute r.session_reset
  ensure
    s&.close
  end
end
