# frozen_string_literal: true

require_relative "helper"

require_relative "desk_tools"

class SandboxTest < Minitest::Test
  include ExecutorHarness

  def test_ok_value_rules
    r = sandbox.eval("[1 + 1, 2**100, :sym, {a: 1.5}, nil, 'h\u00e9', 'x'.b + \"\\xff\".b]")
    assert_equal "ok", r.status, r.error.inspect
    assert_equal [2, 2**100, "sym", { "a" => 1.5 }, nil, "h\u00e9", "x\xff".b], r.value
    assert_equal Encoding::BINARY, r.value.last.encoding
  end

  def test_stdout_and_error_status
    live = []
    r = sandbox.eval("puts 'hi'; $stderr.print 'warn'; 1/0") { |stream, bytes| live << [stream, bytes] }
    assert_equal "hi\n", live.select { _1[0] == :stdout }.map(&:last).join
    assert_equal "warn", r.stderr
    assert_equal "error", r.status
    assert_equal "hi\n", r.stdout
    assert_equal "ZeroDivisionError", r.error.class_name
    assert_match(/divided by 0/, r.error.message)
  end

  def test_statuses_from_limits
    assert_equal "timeout", sandbox(timeout: 0.3).eval("loop {}").status
    assert_equal "fuel_exhausted", sandbox(fuel: 1_000_000).eval("i = 0; i += 1 while true").status
    assert_equal "memory_limit", sandbox(memory: 400 << 20).eval("a = []; loop { a << ('x' * (1 << 20)) }").status
    r = sandbox(output: 1000).eval("print 'y' * 5000; 1")
    assert r.stdout_truncated
    assert_operator r.stdout.bytesize, :<, 2000 # the cap plus its truncation marker
  end

  def test_tools_called_back
    tools = DeskTools.new
    sb = sandbox(tools)
    assert_equal %i[blob change_plan customer echo explode handle orders], sb.exposed_functions
    r = sb.eval(<<~RUBY)
      shipped = orders(status: "shipped")
      c = customer(42)
      [shipped.size, shipped[0]["status"], c["balance"], blob]
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal [1, "shipped", 2**70, "\x00\xffbytes".b], r.value
    assert_equal %w[orders customer blob], r.tool_calls.map(&:name)
    assert_equal [{ "status" => "shipped" }], r.tool_calls.map(&:kwargs).first(1)
    assert r.tool_calls.all?(&:ok?)
  end

  def test_tool_raises_rescuable_with_its_class
    sb = sandbox(DeskTools.new)
    r = sb.eval(<<~RUBY)
      begin
        customer(7)
      rescue Glovebox::NotFound => e
        [e.class.name, e.class.ancestors.include?(Glovebox::ToolError), e.message]
      end
    RUBY
    assert_equal ["Glovebox::NotFound", true, "no customer 7"], r.value
    assert_equal "error", r.tool_calls.first.outcome
    r = sb.eval("begin; customer(1, 2); rescue ArgumentError => e; 'arg'; end")
    assert_equal "arg", r.value
  end

  def test_unrescued_tool_error_ends_with_error_status
    r = sandbox(DeskTools.new).eval("customer(7)")
    assert_equal "error", r.status
    assert_equal "Glovebox::NotFound", r.error.class_name
  end

  def test_sanitizer
    seen = []
    sb = sandbox(DeskTools.new, error_sanitizer: lambda { |name, e|
      seen << [name, e.message]
      "#{name} failed (reference 17)"
    })
    r = sb.eval("begin; explode; rescue Glovebox::ToolError => e; e.message; end")
    assert_equal "explode failed (reference 17)", r.value
    assert_equal [[:explode, "SELECT * FROM secrets WHERE token='abc' failed"]], seen
    refute_match(/secrets/, r.tool_calls.first.error)
    bad = sandbox(DeskTools.new, error_sanitizer: ->(_n, _e) { raise "oops" })
    assert_equal "tool call failed", bad.eval("begin; explode; rescue => e; e.message; end").value
  end

  def test_before_hook_vetoes_and_after_hook_observes
    after = []
    tools = DeskTools.new
    sb = sandbox(tools,
                 before_tool_call: ->(name, args, _kw) { raise "rate limited: #{name}" if name == :change_plan && args == ["free"] },
                 after_tool_call: ->(name, _a, _k, result) { after << [name, result] })
    r = sb.eval(<<~RUBY)
      a = begin; change_plan("free"); rescue Glovebox::ToolError => e; e.message; end
      [a, change_plan("pro")]
    RUBY
    assert_equal ["rate limited: change_plan", "plan is pro"], r.value
    assert_equal %w[vetoed ok], r.tool_calls.map(&:outcome)
    assert_equal ["pro"], tools.changed
    assert_equal [[:change_plan, "plan is pro"]], after
  end

  def test_ceiling_only_except
    tools = DeskTools.new
    refute_includes sandbox(tools).exposed_functions, :reset!
    assert_equal %i[orders], sandbox(tools, only: %i[orders]).exposed_functions
    refute_includes sandbox(tools, except: %i[explode]).exposed_functions, :explode
    e = assert_raises(Glovebox::ConfigError) { sandbox(tools, only: %i[reset!]) }
    assert_match(/only: reset! is not an exposable function/, e.message)
    assert_raises(Glovebox::ConfigError) { sandbox(tools, except: %i[ordrs]) }
    r = sandbox(tools, only: %i[orders]).eval("begin; explode; rescue NameError; 'hidden'; end")
    assert_equal "hidden", r.value
  end

  StructTools = Struct.new(:user) do
    def whoami = user
  end

  class BaseTools
    def shared = "base"
  end

  class ChildTools < BaseTools
    def own = "child"
  end

  def test_exposes_own_methods_not_core_ones
    assert_equal %i[whoami], sandbox(StructTools.new("ada")).exposed_functions - %i[user user=]
    refute_includes sandbox(StructTools.new("ada")).exposed_functions, :to_h
    assert_equal %i[own shared], sandbox(ChildTools.new).exposed_functions
    extra = ChildTools.new
    def extra.single = "singleton"
    assert_equal %i[own shared single], sandbox(extra).exposed_functions
  end

  # The executor refuses a reserved name too: a Sandbox refuses it first
  # (test_settings.rb), so only a request made without the gem's check
  # reaches this rule.
  def test_reserved_name_refused_by_the_executor
    e = assert_raises(Glovebox::APIError) do
      executor.client.request(:post, "/v1/sessions", { "tools" => ["dig"], "limits" => {} })
    end
    assert_equal "bad_request", e.code
    assert_match(/dig/, e.message)
  end

  def test_value_without_data_form_raises_type_error_in_guest
    r = sandbox(DeskTools.new).eval("begin; handle; rescue TypeError => e; e.message; end")
    assert_match(/handle returned a value that cannot cross.*Object has no data form/, r.value)
    r = sandbox(DeskTools.new).eval("echo({'k' => [1, nil, true, 2**65, 1.25]})")
    assert_equal({ "k" => [1, nil, true, 2**65, 1.25] }, r.value)
  end

  def test_tool_call_budget
    r = sandbox(DeskTools.new, tool_calls: 2).eval("5.times { orders }; 1")
    assert_equal "tool_budget_exceeded", r.status
    assert_equal "budget_exceeded", r.tool_calls.last.outcome
  end

  def test_tool_time_budget
    slow = Class.new do
      def nap = sleep(0.2)
    end.new
    r = sandbox(slow, tool_time: 0.3, timeout: 10).eval("5.times { nap }; 1")
    # The same status and outcome as Go's glovebox and the README.
    assert_equal "tool_budget_exceeded", r.status
    assert_equal "budget_exceeded", r.tool_calls.last.outcome
    assert_match(/tool-time budget \(tool_time\)/, r.tool_calls.last.error)
    assert_equal 2, r.tool_calls.size # the call that went over ends the eval, as in Go
  end

  def test_approval_by_block
    tools = DeskTools.new
    asked = []
    sb = sandbox(tools).require_approval(:change_plan) do |name, args, _kw|
      asked << [name, args]
      args == ["pro"]
    end
    r = sb.eval(<<~RUBY)
      d = begin; change_plan("free"); rescue Glovebox::ToolDenied => e; e.class.name; end
      [d, change_plan("pro")]
    RUBY
    assert_equal ["Glovebox::ToolDenied", "plan is pro"], r.value
    assert_equal %w[denied approved], r.tool_calls.map(&:approval)
    assert_equal [[:change_plan, ["free"]], [:change_plan, ["pro"]]], asked
  end

  # An approval answered after the eval's deadline must not run the
  # tool: the executor's tool_call says how long the call may take, and
  # the transcript records the call as not run.
  def test_approval_after_the_deadline_never_runs_the_tool
    tools = DeskTools.new
    sb = sandbox(tools, timeout: 0.5).require_approval(:change_plan) do
      sleep 1.0
      true
    end
    r = sb.eval('change_plan("pro")')
    assert_equal "timeout", r.status
    assert_empty tools.changed, "the tool ran after its eval ended"
    call = r.tool_calls.last
    assert_equal "timeout", call.outcome
    assert_equal "approved", call.approval
    assert_match(/did not run/, call.error)
    assert_equal "ok", sb.eval("1").status # the Sandbox goes on
  end

  def test_canceled_from_another_thread
    started = Queue.new
    waiter = Class.new do
      define_method(:ready) { started << true; nil }
    end.new
    sb = sandbox(waiter, timeout: 20)
    key = "e-#{SecureRandom.hex(16)}"
    t = Thread.new { sb.eval("ready; sleep 15; 1", key: key) }
    started.pop
    Glovebox::Sandbox.new(client: executor.client).cancel(key)
    r = t.value
    assert_equal "canceled", r.status, r.error.inspect
  end

  # The stream breaks while the executor goes on: the eval is in doubt;
  # a retry under its key attaches to it, and the tool call already
  # answered is answered from memory, not made again.
  def test_in_doubt_retry_never_remakes_a_tool_call
    calls = 0
    sb = nil
    tools = Class.new do
      define_method(:charge) do |amount|
        calls += 1
        sb.client.instance_variable_get(:@conns)[:stream].finish # the app's connection drops
        "charged #{amount}"
      end
    end.new
    sb = sandbox(tools)
    code = 'r = charge(5); sleep 0.2; r + "!"'
    err = assert_raises(Glovebox::InDoubtError) { sb.eval(code) }
    r = sb.retry(code, err)
    assert_equal "ok", r.status, r.error.inspect
    assert_equal "charged 5!", r.value
    assert_equal 1, calls
    assert_equal err.key, r.key
    assert_equal %w[charge], r.tool_calls.map(&:name)
  end

  def test_stdin_and_args
    r = sandbox.eval("[STDIN.read, ARGV]", stdin: "in put", args: %w[a b])
    assert_equal ["in put", %w[a b]], r.value
  end

  def test_session_keeps_state
    sandbox(DeskTools.new).session do |s|
      assert_match(/\As-[0-9a-f]{32}\z/, s.id)
      assert_equal "ok", s.eval("def total = orders.sum { _1['total'] }; @n = 1").status
      assert_equal [129.5, 2], s.eval("[total, @n += 1]").value
      r = s.eval("loop {}")
      assert_includes %w[timeout], r.status
    end
  end

  def test_session_reset_after_a_limit
    sb = sandbox(timeout: 0.5)
    sb.session do |s|
      s.eval("x = 5")
      assert s.eval("loop {}").session_reset
      assert_equal "gone", s.eval("defined?(x) ? x : 'gone'").value
    end
  end

  def test_bad_token_refused
    c = Glovebox::Client.new(url: executor.url, token: "gbx_wrong", ca_file: executor.ca_file)
    e = assert_raises(Glovebox::APIError) { Glovebox::Sandbox.new(client: c).eval("1") }
    assert_equal "unauthenticated", e.code
    assert_equal 401, e.http_status
    assert_match(/unauthenticated/, e.message)
  end

  def test_oversized_request_refused
    e = assert_raises(Glovebox::APIError) { sandbox.eval("x = '#{"a" * 70_000}'") }
    assert_equal "request_too_large", e.code
    assert_equal 413, e.http_status
  end

  # 20 MB over a 64 KiB max_request_bytes: refused before the body is
  # sent (Expect: 100-continue), not an in-doubt broken connection.
  def test_huge_request_refused_not_in_doubt
    e = assert_raises(Glovebox::APIError) { sandbox.eval("x = '#{"a" * 20_000_000}'") }
    assert_equal "request_too_large", e.code
    assert_equal 413, e.http_status
    assert_equal "ok", sandbox.eval("1").status # the Client goes on
  end

  def test_token_read_with_its_newline_works
    c = Glovebox::Client.new(url: executor.url, token: "#{executor.token}\n", ca_file: executor.ca_file)
    assert_equal "ok", Glovebox::Sandbox.new(client: c).eval("1").status
    e = assert_raises(Glovebox::ConfigError) do
      Glovebox::Client.new(url: executor.url, token: "#{executor.token}\n#{executor.token}", ca_file: executor.ca_file)
    end
    assert_match(/token: the bearer token has whitespace or control characters inside it/, e.message)
    refute_includes e.message, executor.token
  end

  def test_ca_file_problems_name_the_file
    missing = File.join(Dir.tmpdir, "no-such-#{rand(1 << 30)}.pem")
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Sandbox.new(executor: executor.url, token: "gbx_x", ca_file: missing) }
    assert_equal "ca_file #{missing}: no such file", e.message
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Box.new(executor: executor.url, token: "gbx_x", ca_file: __FILE__) }
    assert_match(/\Aca_file #{Regexp.escape(__FILE__)}: not a PEM file of certificates/, e.message)
  end

  def test_connection_refused_is_not_in_doubt
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    sb = Glovebox::Sandbox.new(executor: "https://127.0.0.1:#{port}", token: "gbx_x", ca_file: executor.ca_file)
    e = assert_raises(Glovebox::ConnectionError) { sb.eval("1") }
    assert_match(/ECONNREFUSED|refused/i, e.message)
  end

  def test_unknown_limit_option
    assert_raises(Glovebox::ConfigError) { sandbox(timout: 1) }
  end
end
