# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"
require "tmpdir"

# Sandboxes, sessions, code mode and boxes with no executor: on the
# glovebox child the gem starts itself (the real binary, GLOVEBOX_BIN).
class EmbeddedTest < Minitest::Test
  def sandbox(tools = nil, **opts) = Glovebox::Sandbox.new(tools: tools, **opts)

  # p sandbox (and a session, box, child, client, code-mode tool) is one
  # short line: no bound methods, tool objects, tokens, keys or
  # credentials.
  def test_inspect_is_short_and_keeps_secrets
    token = "gbx_#{"t" * 40}"
    api_key = "e2b_#{"k" * 30}"
    Glovebox.state_key = "5c" * 32
    client = Glovebox::Client.new(url: "https://127.0.0.1:1", token: token)
    sb = sandbox(DeskTools.new, timeout: 5, before_tool_call: ->(name, _args) { name })
    assert_equal "#<Glovebox::Sandbox embedded functions: blob, change_plan, customer, echo, explode, handle, orders timeout=5>", sb.inspect
    assert_equal 1, sb.eval("1").value
    lines = [sb.inspect, sb.session.inspect, Glovebox::Child.current.inspect,
             Glovebox::Sandbox.new(tools: DeskTools.new, client: client).inspect, client.inspect,
             Glovebox::Box.new(credentials: { "API" => "s3cr3t-credential" }).inspect,
             Glovebox::Box.new(executor: "https://user:pw@127.0.0.1:1", token: token).inspect,
             Glovebox::Box.hosted(:e2b, api_key: api_key).inspect, Glovebox::CodeMode.new(sb).inspect]
    lines.each do |line|
      assert_operator line.size, :<, 160, line
      [token, api_key, Glovebox.state_key, "s3cr3t", "pw@", "Method", "Proc", "DeskTools"].each do |secret|
        refute_includes line, secret
      end
    end
    assert_match(/\A#<Glovebox::Child pid=\d+ glovebox/, lines[2])
    assert_equal "#<Glovebox::Box backend=:remote trust=:remote>", lines[6]
  ensure
    Glovebox.state_key = nil
  end

  def test_eval_with_tools_output_and_value_rules
    live = []
    sb = sandbox(DeskTools.new)
    assert sb.embedded?
    r = sb.eval(<<~RUBY) { |stream, bytes| live << [stream, bytes] }
      puts "looking"
      $stderr.print "warn"
      c = customer(42)
      [orders(status: "shipped").size, c["balance"], blob, :sym, 2**100, (customer(7) rescue $!.class.name)]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal [1, 2**70, "\x00\xffbytes".b, "sym", 2**100, "Glovebox::NotFound"], r.value
    assert_equal "looking\n", r.stdout
    assert_equal "warn", r.stderr
    assert_equal "looking\n", live.select { _1[0] == :stdout }.map(&:last).join
    assert_equal %w[customer orders blob customer], r.tool_calls.map(&:name)
    assert_equal %w[ok ok ok error], r.tool_calls.map(&:outcome)
    assert_match(/\Ae-[0-9a-f]{32}\z/, r.key)
  end

  def test_statuses_and_guest_errors
    assert_equal "timeout", sandbox(timeout: 0.3).eval("loop {}").status
    assert_equal "fuel_exhausted", sandbox(fuel: 1_000_000).eval("i = 0; i += 1 while true").status
    r = sandbox.eval("1/0")
    assert_equal "error", r.status
    assert_equal "ZeroDivisionError", r.error.class_name
    assert_equal "ok", sandbox.eval("[STDIN.read, ARGV]", stdin: "in put", args: %w[a b]).then { |x|
      assert_equal ["in put", %w[a b]], x.value
      x.status
    }
    r = sandbox(DeskTools.new, tool_calls: 2).eval("5.times { orders }; 1")
    assert_equal "tool_budget_exceeded", r.status
    assert_equal "budget_exceeded", r.tool_calls.last.outcome
  end

  def test_hooks_sanitizer_and_approval_run_here
    tools = DeskTools.new
    after = []
    sb = sandbox(tools, error_sanitizer: ->(name, _e) { "#{name} failed" },
                        before_tool_call: ->(name, args, _kw) { raise "no free plans" if name == :change_plan && args == ["free"] },
                        after_tool_call: ->(name, _a, _k, res) { after << [name, res] })
    sb.require_approval(:change_plan) { |_n, args, _kw| args != ["max"] }
    r = sb.eval(<<~RUBY)
      [(change_plan("free") rescue $!.message), (change_plan("max") rescue $!.class.name), change_plan("pro"),
       (explode rescue $!.message)]
    RUBY
    assert_equal ["no free plans", "Glovebox::ToolDenied", "plan is pro", "explode failed"], r.value
    assert_equal ["pro"], tools.changed
    assert_equal [:change_plan, "plan is pro"], after.first
  end

  # What the README says hooks get: the tool's name as a Symbol, the
  # positional arguments as an Array, the keywords with String keys.
  def test_hook_arguments_as_documented
    seen = []
    sb = sandbox(DeskTools.new, before_tool_call: ->(n, a, k) { seen << [:before, n, a, k] },
                                after_tool_call: ->(n, a, k, _r) { seen << [:after, n, a, k] },
                                error_sanitizer: ->(n, _e) { seen << [:sanitizer, n] && "no" })
    sb.require_approval(:orders) { |n, a, k| seen << [:approval, n, a, k] }
    assert_equal "ok", sb.eval('orders(status: "shipped"); customer(42); explode rescue nil').status
    kw = { "status" => "shipped" }
    assert_equal [[:before, :orders, [], kw], [:approval, :orders, [], kw], [:after, :orders, [], kw],
                  [:before, :customer, [42], {}], [:after, :customer, [42], {}], [:before, :explode, [], {}], [:sanitizer, :explode]], seen
  end

  # Output past its limit is cut and marked; it has no status of its
  # own, and the guest runs on (the README's "Limits").
  def test_output_past_its_limit_is_cut_and_the_status_stays
    r = sandbox(output: 1024).eval('print "x" * 5000; $stdout.flush; 7')
    assert_equal ["ok", 7, true], [r.status, r.value, r.stdout_truncated]
    assert_equal "#{"x" * 1024}\n[glovebox: stdout truncated at 1024 bytes]\n", r.stdout
    r = sandbox(output: 1024, timeout: 1).eval('10_000_000.times { |i| puts i }; "done"')
    assert_equal ["timeout", true], [r.status, r.stdout_truncated]
    assert_match(/\A0\n1\n2\n.*\[glovebox: stdout truncated at 1024 bytes\]\n\z/m, r.stdout)
  end

  # Issue 33: once an eval has ended, no call of it starts here. An
  # approval decided after the deadline runs nothing.
  def test_a_call_decided_after_the_deadline_does_not_run
    tools = DeskTools.new
    sb = sandbox(tools, timeout: 0.5).require_approval(:change_plan) do
      sleep 1.0
      true
    end
    r = sb.eval('change_plan("pro")')
    assert_equal "timeout", r.status
    assert_empty tools.changed
    assert_equal "timeout", r.tool_calls.last.outcome
    assert_match(/did not run/, r.tool_calls.last.error)
  end

  def test_app_wide_defaults_and_overrides
    Glovebox.timeout = 0.3
    assert_equal 0.3, Glovebox.config.timeout
    assert_equal "timeout", sandbox.eval("loop {}").status
    assert_equal "ok", sandbox(timeout: 5).eval("sleep 0.5; 1").status
    Glovebox.configure { |c| c.tool_calls = 1 }
    assert_equal "tool_budget_exceeded", sandbox(DeskTools.new, timeout: 5).eval("orders; orders; 1").status
  ensure
    Glovebox.configure do |c|
      c.timeout = nil
      c.tool_calls = nil
    end
  end

  def test_sessions
    sandbox(DeskTools.new).session do |s|
      assert_match(/\As-[0-9a-f]{32}\z/, s.id)
      assert_equal "ok", s.eval("def total = orders.sum { _1['total'] }; @n = 1").status
      assert_equal [129.5, 2], s.eval("[total, @n += 1]").value
    end
    sb = sandbox(timeout: 0.5)
    s = sb.session
    s.eval("x = 5")
    assert s.eval("loop {}").session_reset
    assert_equal "gone", s.eval("defined?(x) ? x : 'gone'").value
    s.close
    s.close # idempotent
    e = assert_raises(Glovebox::RunError) { s.eval("1") }
    assert_equal "not_found", e.code
  end

  def test_cancel_from_another_thread
    started = Queue.new
    waiter = Class.new { define_method(:ready) { started << true; nil } }.new
    key = "e-#{SecureRandom.hex(16)}"
    t = Thread.new { sandbox(waiter, timeout: 20).eval("ready; sleep 15; 1", key: key) }
    started.pop
    Glovebox::Sandbox.new.cancel(key)
    assert_equal "canceled", t.value.status
    e = assert_raises(Glovebox::APIError) { Glovebox::Sandbox.new.cancel(key) }
    assert_equal "not_found", e.code
  end

  def test_code_mode_made_by_the_child
    sb = sandbox(DeskTools.new, only: %i[orders customer], tool_calls: 20)
    tool = Glovebox::CodeMode.new(sb, instructions: "You answer for customer 42.",
                                      docs: { orders: { description: "The customer's orders, newest first." } })
    assert_equal "run_ruby", tool.name
    assert_match(/The customer's orders, newest first/, tool.description)
    assert_match(/20 function calls/, tool.description)
    out = JSON.parse(tool.call(code: 'puts "x"; orders.size'))
    assert_equal ["ok", 2, "x\n"], out.values_at("status", "value", "stdout")
    assert_equal "orders", out.dig("tool_calls", 0, "name")
    e = assert_raises(Glovebox::APIError) { Glovebox::CodeMode.new(sb, name: "no spaces") }
    assert_equal "bad_request", e.code
  end

  def test_refusals_are_api_errors_named_by_code
    # A reserved name is the gem's own refusal, when the Sandbox is built
    # (the child would refuse it too).
    e = assert_raises(Glovebox::ConfigError) { sandbox(Class.new { def dig(x) = x }.new) }
    assert_match(/dig/, e.message)
    e = assert_raises(Glovebox::APIError) { sandbox(DeskTools.new, suspend: [:change_plan]).eval("1") }
    assert_match(/state key/, e.message) unless Glovebox.state_key
  end

  def test_mounts_read_only_unless_writable
    Dir.mktmpdir do |dir|
      ro = File.join(dir, "ro")
      rw = File.join(dir, "rw")
      Dir.mkdir(ro)
      Dir.mkdir(rw)
      File.write(File.join(ro, "data.csv"), "a,b\n1,2\n")
      sb = sandbox(mounts: [{ host: ro, guest: "/data" }, { host: rw, guest: "/out", writable: true }])
      r = sb.eval(<<~RUBY)
        rows = File.readlines("/data/data.csv").size
        denied = begin; File.write("/data/x", "no"); "written"; rescue SystemCallError => e; e.class.name; end
        File.write("/out/report.txt", "rows: \#{rows}")
        [rows, denied]
      RUBY
      assert_equal "ok", r.status, r.error.inspect
      assert_equal 2, r.value[0]
      assert_match(/Errno::E(ROFS|ACCES|PERM)/, r.value[1])
      refute File.exist?(File.join(ro, "x"))
      assert_equal "rows: 2", File.read(File.join(rw, "report.txt"))
    end
    e = assert_raises(Glovebox::ConfigError) { sandbox(mounts: [{ host: "/tmp" }]) }
    assert_match(/guest:/, e.message)
    e = assert_raises(Glovebox::ConfigError) do
      Glovebox::Sandbox.new(executor: "https://127.0.0.1:1", token: "gbx_x", mounts: [{ host: "/tmp", guest: "/d" }])
    end
    assert_match(/operator/, e.message)
  end

  def test_box_runs_on_this_host
    box = Glovebox::Box.new
    seen = []
    r = box.run(["/bin/sh", "main.sh"], files: { "main.sh" => "cat; echo \"$MODE\"; echo \"${HOME_SECRET-unset}\"; exit 3" },
                                        stdin: "from stdin\n", env: { "MODE" => "fast" }, timeout: 20) { |s, b| seen << [s, b] }
    assert_equal 3, r.exit_status
    assert_equal "from stdin\nfast\nunset\n", r.stdout
    assert_equal r.stdout, seen.select { |s, _| s == :stdout }.map(&:last).join
    assert_equal :host, box.trust
    refute box.off_host?
    assert_includes %w[namespaces gvisor], r.isolation
    assert box.run(shell: "sleep 5", timeout: 0.5).timed_out
    assert_raises(Glovebox::ConfigError) { box.run }
    e = assert_raises(Glovebox::APIError) { box.run(["true"], files: { "../escape" => "x" }) }
    assert_equal "invalid_command", e.code
    assert_raises(Glovebox::ConfigError) { box.lookup("r-x") }
  end

  # A host with neither bubblewrap nor gVisor: the run is refused,
  # saying what is missing and what to do.
  def test_box_without_an_os_sandbox_says_why
    Glovebox::Child.stop
    Glovebox.child_env = { "PATH" => "/nonexistent" }
    e = assert_raises(Glovebox::APIError) { Glovebox::Box.new.run(["true"]) }
    assert_equal "unavailable", e.code
    assert_match(/bubblewrap \(bwrap\) not found.*gVisor \(runsc\) not found.*install bubblewrap/, e.message)
    assert_match(/bubblewrap/, Glovebox::Box.new.info["error"])
  ensure
    Glovebox.child_env = {}
    Glovebox::Child.stop
  end
end
