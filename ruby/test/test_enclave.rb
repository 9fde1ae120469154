# frozen_string_literal: true

require_relative "helper"
require "glovebox/enclave"

# The Enclave drop-in (require "glovebox/enclave"): Enclave's documented
# API and behaviour, embedded and through an executor, against the real
# binary.
class EnclaveTest < Minitest::Test
  include ThroughExecutor

  module TestTools
    def double(n) = n * 2
    def greet(name) = "Hello, #{name}!"
    def info = { name: "test", version: 1, tags: %w[a b], state: :active }
    def echo_all(a, b, c) = [a, b, c]
    def raise_error = raise("something went wrong")
    def bad_return = Object.new
    def nested_bad = { "ok" => [1, Time.at(0)] }
  end

  class AccountTools
    def initialize(user) = @user = user
    def user_info = { name: @user[:name], plan: @user[:plan] }

    def change_plan(new_plan)
      @user[:plan] = new_plan
      { success: true, plan: new_plan }
    end
  end

  class BillingTools
    def charge(amount) = { charged: amount }
  end

  class WeatherTool
    def forecast(city) = "sunny in #{city}"
    def reset_cache! = :reset
    def audit = []

    private def enclave_tool_methods = %i[forecast audit]
  end

  def setup = @enclaves = []

  def teardown
    @enclaves.each(&:close)
    Enclave.timeout = Enclave.memory_limit = Enclave.max_instructions = Enclave.max_tool_calls = Enclave.max_tool_seconds = nil
    Enclave.max_output_bytes = Enclave::DEFAULT_MAX_OUTPUT_BYTES
  end

  def enclave(**opts) = Enclave.new(**opts).tap { @enclaves << _1 }

  def test_eval_values_output_and_errors
    e = enclave
    assert_equal "2", e.eval("1 + 1").value
    refute e.eval("1 + 1").error?
    assert_equal '"hello"', e.eval('"hello"').value
    assert_equal "5", e.eval("def add(a, b)\n  a + b\nend\nadd(2, 3)").value
    r = e.eval('puts "hi"; 42')
    assert_equal ["hi\n", "42", "hi\n=> 42"], [r.output, r.value, r.to_s]
    assert_equal "=> 2", e.eval("1 + 1").to_s
    assert_equal "a\nb\n", e.eval('puts "a"; puts "b"').output
    assert_equal "1\n2\n3\n", e.eval("puts [1, 2, 3]").output
    assert_equal "42\n", e.eval("p 42").output
    assert_equal "second\n", e.eval('puts "second"').output
    r = e.eval("1 / 0")
    assert r.error?
    assert_nil r.value
    assert_equal "ZeroDivisionError: divided by 0", r.error
    assert_equal "Error: ZeroDivisionError: divided by 0", r.to_s
    assert_match(/\ASyntaxError/, e.eval("def foo(").error)
    assert_match(/\ANameError/, e.eval("undefined_variable_xyz").error)
    assert_equal "2", e.eval("1 + 1").value, "usable after errors"
    assert_match(/Enclave::Result value="2"/, e.eval("2").inspect)
    assert_equal "ok", e.eval("3").glovebox_result.status
  end

  def test_state_persists
    e = enclave
    e.eval("x = 42")
    assert_equal "84", e.eval("x * 2").value
    e.eval("def greet(name) = 'Hello ' + name")
    assert_equal '"Hello world"', e.eval("greet('world')").value
    e.eval("@count = 0")
    e.eval("@count += 1")
    assert_equal "1", e.eval("@count").value
    e.eval("42")
    assert_equal "50", e.eval("_ + 8").value
    assert_equal "50", e.eval("_").value
    e.eval("raise 'no'")
    assert_equal "50", e.eval("_").value, "a failed eval leaves _ as it was"
    assert_equal "[:_, :x]", e.eval("local_variables.sort").value, "the wrapper adds no local but _"
    e.reset!
    assert e.eval("x").error?
    assert e.eval("greet('a')").error?
    assert_equal "2", e.eval("1 + 1").value
    other = enclave
    e.eval("y = 10")
    assert_equal '"nil"', other.eval("defined?(y).inspect").value, "each enclave's state is its own"
  end

  def test_close_and_open
    e = Enclave.new
    refute e.closed?
    e.close
    assert e.closed?
    e.close
    err = assert_raises(RuntimeError) { e.eval("1") }
    assert_match(/closed/, err.message)
    result = Enclave.open(tools: TestTools) do |sb|
      refute sb.closed?
      sb.eval("double(100)")
    end
    assert_equal "200", result.value
  end

  def test_tools_from_modules_and_objects
    e = enclave(tools: TestTools)
    assert_equal %i[bad_return double echo_all greet info nested_bad raise_error], e.exposed_functions
    assert_equal "42", e.eval("double(21)").value
    assert_equal '"Hello, World!"', e.eval('greet("World")').value
    assert_equal '[1, "two", 3.0]', e.eval('echo_all(1, "two", 3.0)').value
    assert_equal '[{"a" => 1}, [2, 3], nil]', e.eval('echo_all({"a" => 1}, [2, 3], nil)').value
    assert_equal "[true, false, nil]", e.eval("echo_all(true, false, nil)").value
    assert_includes e.eval("info()").value, '"name" => "test"'
    assert_includes e.eval("info()").value, '"tags" => ["a", "b"]'
    assert_equal '"test"', e.eval('info()["name"]').value
    assert_equal "nil", e.eval("info()[:state]").value, "symbols do not survive the boundary"
    assert_equal '"active"', e.eval('info()["state"]').value
    assert_equal "20", e.eval("double(double(5))").value

    user = { name: "Jane Doe", plan: "basic" }
    e2 = enclave(tools: AccountTools.new(user))
    e2.eval('change_plan("premium")')
    assert_equal "premium", user[:plan]
    e2.expose(BillingTools.new)
    assert_includes e2.eval("charge(999)").value, '"charged" => 999'
    assert_includes e2.eval("user_info()").value, '"name" => "Jane Doe"'
    e2.reset!
    assert_includes e2.eval("user_info()").value, '"plan" => "premium"', "tools survive reset!"
  end

  def test_expose_narrowing_and_ceiling
    e = enclave
    e.expose(TestTools, only: %i[double greet])
    assert_equal %i[double greet], e.exposed_functions
    e2 = enclave
    e2.expose(TestTools, except: %i[raise_error bad_return nested_bad echo_all info])
    assert_equal %i[double greet], e2.exposed_functions
    err = assert_raises(ArgumentError) { enclave.expose(TestTools, only: %i[dubble]) }
    assert_match(/dubble is not an exposable function/, err.message)
    assert_raises(ArgumentError) { enclave.expose(TestTools, except: %i[nope]) }
    e3 = enclave(tools: WeatherTool.new)
    assert_equal %i[audit forecast], e3.exposed_functions
    e4 = enclave
    e4.expose(WeatherTool.new, except: %i[audit])
    assert_equal %i[forecast], e4.exposed_functions, "reset_cache! stays out even under except:"
    assert_equal '"sunny in Oslo"', e4.eval('forecast("Oslo")').value
    assert_match(/reset_cache!/, e4.eval("reset_cache!").error)
    assert_raises(ArgumentError) { e4.expose(WeatherTool.new, only: %i[forecast]) }
  end

  def test_tool_errors_and_values
    e = enclave(tools: TestTools)
    r = e.eval("raise_error()")
    assert r.error?
    assert_includes r.error, "something went wrong"
    assert r.error.end_with?("RuntimeError: something went wrong"), r.error
    assert_equal '"rescued: something went wrong"', e.eval("begin; raise_error; rescue => x; 'rescued: ' + x.message; end").value
    assert_equal "TypeError: unsupported type for sandbox: Object", e.eval("bad_return()").error
    assert_equal "TypeError: unsupported type for sandbox: Time", e.eval("nested_bad()").error
    assert_equal "6", e.eval("double(3)").value, "details still work"
  end

  def test_limits_raise_and_the_enclave_stays_usable
    e = enclave(timeout: 1)
    err = assert_raises(Enclave::TimeoutError) { e.eval("loop {}") }
    assert_equal "execution timeout exceeded", err.message
    assert_kind_of Enclave::Error, err
    assert_operator Enclave::Error, :<, StandardError
    assert_equal "2", e.eval("1 + 1").value

    m = enclave(memory_limit: 10_000_000)
    err = assert_raises(Enclave::MemoryLimitError) { m.eval('"x" * 100_000_000') }
    assert_equal "NoMemoryError", err.message
    assert_equal "2", m.eval("1 + 1").value

    i = enclave(max_instructions: 1_000_000)
    err = assert_raises(Enclave::InstructionLimitError) { i.eval("i = 0; i += 1 while true") }
    assert_equal "instruction limit exceeded", err.message
    assert_equal "1000", i.eval("i = 0; i += 1 while i < 1000; i").value

    t = enclave(tools: TestTools, max_tool_calls: 50)
    err = assert_raises(Enclave::ToolBudgetError) { t.eval("1000.times { double(1) }") }
    assert_equal "tool-call count budget exceeded (max 50)", err.message
    assert_equal "8", t.eval("double(4)").value

    slow = Class.new { def nap = sleep(0.3) }.new
    s = enclave(tools: slow, max_tool_seconds: 0.5, timeout: 10)
    err = assert_raises(Enclave::ToolBudgetError) { s.eval("5.times { nap }") }
    assert_match(/tool-call time budget exceeded/, err.message)

    o = enclave(max_output_bytes: 100)
    r = o.eval('print "x" * 1000; :done')
    assert_equal ":done", r.value, "output is truncated, the code runs on"
    assert r.output.start_with?("x" * 100)
    assert_match(/truncated at 100 bytes/, r.output)
  end

  def test_class_defaults
    Enclave.timeout = 1
    Enclave.memory_limit = 10_000_000
    e = enclave
    assert_equal [1, 10_000_000], [e.timeout, e.memory_limit]
    assert_raises(Enclave::TimeoutError) { e.eval("loop {}") }
    assert_equal 3, enclave(timeout: 3).timeout, "per-instance values win"
    assert_nil enclave(timeout: nil).timeout
    assert_equal Enclave::DEFAULT_MAX_OUTPUT_BYTES, enclave.max_output_bytes
    Enclave.max_output_bytes = nil
    assert_nil enclave.max_output_bytes
    assert_raises(ArgumentError) { Enclave.new(timeout: -1) }
    assert_raises(ArgumentError) { Enclave.new(memory_limit: 1.5) }
  end

  def test_hooks_and_sanitizer
    seen = []
    e = enclave(tools: TestTools,
                before_tool_call: ->(name, args) { seen << [:before, name, args]; raise "rate limited" if name.to_s == "greet" },
                after_tool_call: ->(name, args, result) { seen << [:after, name, args, result] })
    assert_equal "4", e.eval("double(2)").value
    assert_equal [[:before, :double, [2]], [:after, :double, [2], 4]], seen
    assert_equal "Glovebox::ToolError: rate limited", e.eval('greet("x")').error
    e.before_tool_call = nil
    assert_equal '"Hello, x!"', e.eval('greet("x")').value
    assert_raises(ArgumentError) { e.before_tool_call = ->(a, b, c, d, f) {} }

    host = []
    s = enclave(tools: TestTools, error_sanitizer: ->(name, exc) { host << exc.message; "#{name} failed" },
                before_tool_call: ->(name, _args) { raise "vetoed: #{name}" if name == :greet })
    assert_equal "Glovebox::ToolError: raise_error failed", s.eval("raise_error").error
    assert_equal ["something went wrong"], host
    assert_equal "Glovebox::ToolError: vetoed: greet", s.eval("greet('a')").error, "a veto is not sanitized"
    s.error_sanitizer = ->(_name, _exc) { raise "sanitizer broke" }
    assert_equal "Glovebox::ToolError: tool call failed", s.eval("raise_error").error
    s.error_sanitizer = ->(_name, _exc) {}
    assert_equal "Glovebox::ToolError: tool call failed", s.eval("raise_error").error
  end

  # What is deliberately different from Enclave's mruby (docs/ruby.md's
  # table says so).
  def test_full_cruby_but_nothing_of_the_host
    e = enclave
    assert_equal "Errno::ENOENT: No such file or directory @ rb_sysopen - /etc/passwd", e.eval('File.read("/etc/passwd")').error
    assert_equal "{}", e.eval("ENV.to_h").value
    assert_equal "nil", e.eval('ENV["SECRET_KEY_BASE"]').value
    assert_match(/\ANotImplementedError: `: the glovebox sandbox cannot start processes/, e.eval("`curl http://attacker.com`").error)
    assert_match(/\ANotImplementedError/, e.eval('system("echo hi")').error)
    assert_equal '"{\"a\":1}"', e.eval('require "json"; JSON.generate(a: 1)').value
    assert_match(/\ANameError/, e.eval("Socket").error)
  end

  def test_tool_for_llm_libraries
    defn = Enclave::Tool.definition
    assert_equal "function", defn[:type]
    assert_equal "eval_ruby", defn[:function][:name]
    assert defn[:function][:parameters][:properties].key?(:code)
    e = enclave
    assert_equal "=> 1024", Enclave::Tool.call(e, code: "2 ** 10")
    assert_equal "Error: ZeroDivisionError: divided by 0", Enclave::Tool.call(e, code: "1/0")
  end

  # A session that went away (idled out, a restarted child) is reopened:
  # the eval runs, with the state afresh. An Enclave collected without
  # #close leaves its session to the next eval to close.
  def test_lost_and_collected_sessions
    e = enclave
    e.eval("x = 1")
    e.instance_variable_get(:@holder).first.close
    r = e.eval("defined?(x).inspect")
    assert_equal '"nil"', r.value
    before = Glovebox::Child.current.info["sessions"]
    gone = Enclave.new
    gone.eval("1")
    assert_equal before + 1, Glovebox::Child.current.info["sessions"]
    Enclave.reaper(gone.instance_variable_get(:@holder)).call # what its finalizer does
    e.eval("2")
    assert_equal before, Glovebox::Child.current.info["sessions"]
  end

  # Enclave's HTTP tool, where this gem has glovebox's (Glovebox::HttpTool):
  # the SSRF floor holds from an Enclave too.
  def test_http_tool
    skip "this glovebox has no Glovebox::HttpTool" unless defined?(Glovebox::HttpTool)

    require "glovebox/enclave/http_tool"
    seen = []
    http = Enclave::HttpTool.new(allow: :any, on_request: ->(r) { seen << r })
    e = enclave
    e.expose(http)
    assert_equal %i[request get head delete post put patch].sort, e.exposed_functions.sort
    r = e.eval('begin; get("http://169.254.169.254/latest/meta-data/"); rescue Glovebox::ToolError => x; x.class.name; end')
    assert_match(/\A"Glovebox::HTTP\w+Error"\z/, r.value)
    r = e.eval('begin; get("http://localhost:8080/"); rescue Glovebox::ToolError => x; x.class.name; end')
    assert_match(/\A"Glovebox::HTTP\w+Error"\z/, r.value)
    assert_equal 2, seen.size
    refute seen.any?(&:ok?)
    assert_operator Enclave::HttpTool::DeniedError, :<, Enclave::Error
    assert_raises(ArgumentError, Glovebox::ConfigError) { Enclave::HttpTool.new(allow: 42) }
  end

  def test_through_an_executor
    through_executor do
      e = enclave(tools: TestTools, timeout: 5)
      e.eval("x = double(21)")
      assert_equal "42", e.eval("x").value
      e.eval("7")
      assert_equal "8", e.eval("_ + 1").value
      assert_raises(Enclave::TimeoutError) { e.eval("loop {}") }
    end
  end
end
