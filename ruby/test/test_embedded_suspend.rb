# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"
require "rbconfig"
require "tmpdir"

# Evals paused at a tool call in embedded mode: the sealed state comes
# back to Ruby as the Result's key, and any process with the same state
# key continues it, once.
class EmbeddedSuspendTest < Minitest::Test
  include ContinuationChecks
  KEY = "5a" * 32

  def setup
    @dir = Dir.mktmpdir("glovebox-claims")
    Glovebox::Child.stop
    Glovebox.state_key = KEY
    Glovebox.state_dir = @dir
  end

  def teardown
    Glovebox::Child.stop
    Glovebox.state_key = nil
    Glovebox.state_dir = nil
    FileUtils.rm_rf(@dir)
  end

  def paused_sandbox(tools = DeskTools.new) = Glovebox::Sandbox.new(tools: tools, suspend: [:change_plan])

  def test_approve_deny_reply_and_once
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    r = sb.eval('print "before "; x = change_plan("pro"); print "after"; x')
    assert_equal "suspended", r.status, r.error.inspect
    assert_equal ["change_plan", ["pro"]], [r.pending.name, r.pending.args]
    assert_match(/\Agbp1\./, r.key)
    assert_empty tools.changed
    r2 = sb.continue(r.key, approve: true)
    assert_equal ["ok", "plan is pro", "before after"], [r2.status, r2.value, r2.stdout]
    assert_equal ["pro"], tools.changed
    e = assert_raises(Glovebox::AlreadyContinued) { sb.continue(r.key, approve: true) }
    assert_equal "already_continued", e.code

    r = sb.eval('begin; change_plan("pro"); rescue Glovebox::ToolDenied => e; "denied: #{e.message}"; end')
    assert_equal "denied: a person said no", sb.continue(r.key, deny: "a person said no").value
    r = sb.eval('change_plan("pro") + [1]')
    assert_equal [{ "done" => true }, 1], sb.continue(r.key, reply: [{ "done" => true }]).value
    e = assert_raises(Glovebox::RunError) { sb.continue("e-#{"0" * 32}", approve: true) }
    assert_equal "not_found", e.code
  end

  # A state key set after the child started (the app's first eval came
  # before its initializer set it) reaches the running child: the same
  # sandbox's next eval pauses. A bad key is refused, naming the rule.
  def test_state_key_set_after_the_child_started
    Glovebox.state_key = nil
    assert_equal 2, Glovebox::Sandbox.new.eval("1 + 1").value
    pid = Glovebox::Child.running.pid
    sb = paused_sandbox
    e = assert_raises(Glovebox::APIError) { sb.eval('change_plan("pro")') }
    assert_match(/needs a state key/, e.message)
    Glovebox.state_key = KEY
    r = sb.eval('change_plan("pro")')
    assert_equal "suspended", r.status, r.error.inspect
    assert_equal "plan is pro", sb.continue(r.key, approve: true).value
    assert_equal pid, Glovebox::Child.running.pid
    assert Glovebox::Child.running.info["suspend"]
    Glovebox.state_key = "not hex"
    e = assert_raises(Glovebox::APIError) { sb.eval('change_plan("pro")') }
    assert_match(/state_key: want 64 hex digits/, e.message)
    Glovebox.state_key = KEY
    assert_equal "suspended", sb.eval('change_plan("pro")').status
  end

  # Glovebox.state_dir says where claims go when none was set: the
  # cache directory's embedded-continued.
  def test_state_dir_defaults_to_the_cache_directory
    Glovebox.state_dir = nil
    assert_equal File.join(Glovebox::Child.cache_dir, "embedded-continued"), Glovebox.state_dir
    Glovebox.state_dir = @dir
    assert_equal @dir, Glovebox.state_dir
  end

  # A continuation's transcript lists the paused call however it was
  # answered: run here (approve), denied with the reason, or answered
  # with the reply; the calls after it follow. In a session too.
  def test_continuation_transcript_lists_the_paused_call
    sb = paused_sandbox
    check_continuation_transcript(sb)
    sb.session do |s|
      s.eval("$n = 1")
      r = s.eval('change_plan("basic")')
      c = sb.continue(r.key, deny: "no").tool_calls
      assert_equal [%w[change_plan denied]], c.map { [_1.name, _1.outcome] }
    end
  end

  # The key is the whole paused state: another process with the same
  # state key continues it, with its own tools.
  def test_continued_by_another_process
    r = paused_sandbox.eval('a = change_plan("pro"); [a, 1]')
    script = <<~RUBY
      require "glovebox"
      require_relative #{File.join(__dir__, "desk_tools").inspect}
      Glovebox.state_key = #{KEY.inspect}
      Glovebox.state_dir = #{@dir.inspect}
      tools = DeskTools.new
      r = Glovebox::Sandbox.new(tools: tools, suspend: [:change_plan]).continue(ARGV[0], approve: true)
      print JSON.generate([r.status, r.value, tools.changed])
    RUBY
    out = IO.popen({ "GLOVEBOX_BIN" => ENV.fetch("GLOVEBOX_BIN") },
                   [RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), "-e", script, r.key], err: %i[child out], &:read)
    assert $?.success?, out
    assert_equal ["ok", ["plan is pro", 1], ["pro"]], JSON.parse(out.lines.last)
    assert_raises(Glovebox::AlreadyContinued) { paused_sandbox.continue(r.key, approve: true) } # one claim dir
  end

  def test_another_key_refuses_the_state
    r = paused_sandbox.eval('change_plan("pro")')
    Glovebox::Child.stop
    Glovebox.state_key = "6b" * 32
    e = assert_raises(Glovebox::RunError) { paused_sandbox.continue(r.key, approve: true) }
    assert_equal "state_refused", e.code
  end

  def test_session_pauses_until_continued
    tools = DeskTools.new
    sb = paused_sandbox(tools)
    s = sb.session
    s.eval("$before = 1")
    r = s.eval('$during = 2; change_plan("pro")')
    assert_equal "suspended", r.status, r.error.inspect
    e = assert_raises(Glovebox::RunError) { s.eval("$before") }
    assert_equal "session_paused", e.code
    assert_equal "plan is pro", sb.continue(r.key, approve: true).value
    assert_equal [1, 2], s.eval("[$before, $during]").value
  ensure
    s&.close
  end
end
