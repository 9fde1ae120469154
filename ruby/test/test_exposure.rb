# frozen_string_literal: true

require_relative "helper"
require "tmpdir"

# What a tools object exposes, in every shape a Rails app hands over:
# only methods its own code defines, bound when exposed. The executor is
# never asked (a Sandbox on an unreachable URL), except by the attack.
class ExposureTest < Minitest::Test
  include ExecutorHarness

  # The names a guest must never reach on a Module or Class tools object.
  HOST_METHODS = %i[module_eval class_eval instance_eval instance_exec const_get const_set instance_method
                    define_method send public_send __send__ new allocate eval method methods
                    remove_const superclass ancestors name to_s inspect include extend].freeze

  module ExtendSelfTools
    extend self

    def orders = [{ "id" => 1 }]
    def refund(id) = "refunded #{id}"

    private

    def audit = "private"
  end

  module FunctionTools
    module_function

    def report(day) = "report #{day}"
  end

  class ClassTools
    def self.orders = [1]
    def self.search(query, limit: 10) = [query, limit]
    def instance_only = "never: an instance method of a Class tools object"
  end

  class ChildClassTools < ClassTools
    def self.extra = 2
  end

  Account = Struct.new(:user, :plan) do
    def whoami = "#{user} on #{plan}"
  end

  class Ghost
    attr_reader :missed

    def method_missing(name, *args)
      (@missed ||= []) << name
      "ghost #{name} #{args}"
    end

    def respond_to_missing?(*) = true
    def real = "real"
    private :missed
  end

  class Shop
    def orders = [1]
    def to_s = "a shop"
    def inspect = "#<Shop>"
    def ==(other) = other.is_a?(Shop)
  end

  def offline(tools = nil, **opts)
    Glovebox::Sandbox.new(tools: tools, executor: "https://127.0.0.1:9", token: "gbx_x", **opts)
  end

  def test_instance_exposes_its_class_methods_only
    assert_equal %i[orders], offline(Shop.new).exposed_functions
  end

  def test_module_with_extend_self_exposes_its_functions
    assert_equal %i[orders refund], offline(ExtendSelfTools).exposed_functions
  end

  def test_module_function_exposes_its_functions
    assert_equal %i[report], offline(FunctionTools).exposed_functions
  end

  def test_class_exposes_its_class_methods
    assert_equal %i[orders search], offline(ClassTools).exposed_functions
    assert_equal %i[extra orders search], offline(ChildClassTools).exposed_functions
  end

  def test_module_and_class_never_expose_host_methods
    [ExtendSelfTools, FunctionTools, ClassTools, Account, Module.new { extend self; def f = 1 }].each do |tools|
      got = begin
        offline(tools).exposed_functions
      rescue Glovebox::ConfigError
        [] # exposes nothing at all (a Struct class)
      end
      assert_empty got & HOST_METHODS, "#{tools.inspect} exposed #{got & HOST_METHODS}"
      HOST_METHODS.each do |m|
        assert_raises(Glovebox::ConfigError, "#{tools.inspect} only: #{m}") { offline(tools, only: [m]) }
      end
    end
  end

  def test_struct_exposes_readers_not_setters
    sb = offline(Account.new("ada", "pro"))
    assert_equal %i[plan user whoami], sb.exposed_functions
    e = assert_raises(Glovebox::ConfigError) { offline(Account.new("ada", "pro"), only: %i[plan=]) }
    assert_match(/plan= is not an exposable function/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline(Account) }
    assert_match(/exposes no functions/, e.message) # a Struct class: new, members, [] are Ruby's
  end

  def test_hash_of_lambdas_binds_by_key
    sb = offline({ weather: ->(city) { "sunny in #{city}" }, "add" => proc { |a, b| a + b }, shop: Shop.new.method(:orders) })
    assert_equal %i[add shop weather], sb.exposed_functions
    e = assert_raises(Glovebox::ConfigError) { offline({ weather: "sunny" }) }
    assert_match(/weather is a String, which is not callable/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline({ "to_s" => -> { 1 } }) }
    assert_match(/to_s would shadow Ruby.s core method/, e.message)
    assert_raises(Glovebox::ConfigError) { offline({}) }
  end

  def test_method_missing_claims_nothing
    ghost = Ghost.new
    sb = offline(ghost)
    assert_equal %i[real], sb.exposed_functions
    st = Glovebox::Sandbox::CallState.new
    assert_equal "s\nreal", sb.send(:answer, { "id" => 1, "name" => "real", "args" => "[[],{}]" }, st)
    assert_match(/\Aerr\nUnknownToolError\n/, sb.send(:answer, { "id" => 2, "name" => "anything", "args" => "[[],{}]" }, st))
    assert_nil ghost.send(:missed), "a call reached method_missing"
    e = assert_raises(Glovebox::ConfigError) { offline(Ghost.new, only: %i[anything]) }
    assert_match(/anything is not an exposable function of .*Ghost instance \(exposable: real\)/, e.message)
  end

  def test_methods_are_bound_when_exposed
    tools = Class.new do
      def orders = "original"
    end.new
    sb = offline(tools)
    tools.define_singleton_method(:orders) { "redefined" }
    tools.define_singleton_method(:wider) { "added later" }
    assert_equal %i[orders], sb.exposed_functions
    call = { "id" => 1, "name" => "orders", "args" => "[[],{}]" }
    assert_equal "s\noriginal", sb.send(:answer, call, Glovebox::Sandbox::CallState.new)
  end

  # The client never runs a name it did not expose, whatever the
  # executor relays (a hostile or broken executor included).
  def test_dispatch_refuses_names_not_exposed
    sb = offline(ExtendSelfTools)
    st = Glovebox::Sandbox::CallState.new
    %w[module_eval class_eval const_get instance_method new send audit].each do |n|
      frame = sb.send(:answer, { "id" => 1, "name" => n, "args" => '[["1"],{}]' }, st)
      assert_match(/\Aerr\nUnknownToolError\n/, frame, n)
    end
    assert_equal ["unknown_tool"], st.calls.map(&:outcome).uniq
  end

  # The attack from issue 33: tools: a Module; the guest tries to reach
  # the host through module_eval, class_eval, const_get, instance_method
  # and new (and the rest of Module's methods), through Glovebox.call.
  # Each is an unknown tool in the guest, and the host is unchanged.
  def test_module_tools_attack_reaches_nothing
    marker = File.join(Dir.tmpdir, "glovebox-attack-#{Process.pid}-#{rand(1 << 30)}")
    tools = Module.new do
      extend self
      def orders = [1, 2]
    end
    sb = Glovebox::Sandbox.new(tools: tools, client: executor.client)
    attempts = {
      "module_eval" => [%(File.write(#{marker.dump}, "pwned"))], "class_eval" => ["`id`"],
      "instance_eval" => ["ENV.to_h"], "const_get" => ["ENV"], "const_set" => %w[PWNED 1],
      "instance_method" => ["orders"], "new" => [], "allocate" => [], "define_method" => ["x"],
      "send" => %w[eval 1], "public_send" => %w[eval 1], "eval" => ["1"]
    }
    code = <<~RUBY
      out = {}
      #{attempts.to_a.inspect}.each do |name, args|
        out[name] = begin
          Glovebox.call(name, *args)
          "RAN"
        rescue Glovebox::Error, NameError => e
          e.class.name
        end
      end
      [orders.size, out]
    RUBY
    r = sb.eval(code)
    assert_equal "ok", r.status, r.error.inspect
    size, out = r.value
    assert_equal 2, size
    attempts.each_key do |name|
      assert_equal "Glovebox::UnknownToolError", out[name], "Glovebox.call(#{name})"
    end
    refute File.exist?(marker), "the guest wrote a host file"
    refute tools.const_defined?(:PWNED, false)
    assert_equal %w[orders], r.tool_calls.map(&:name).uniq
  ensure
    File.delete(marker) if marker && File.exist?(marker)
  end

  # Library code is never exposed: an app class mixing in a gem's
  # module (an HTTP client's get/post, a framework's persistence
  # methods), inheriting from a gem's base class, or a Module or Class
  # Ruby defines (Dir.glob and Marshal.restore are Ruby code, in
  # <internal:...> files) offers only what the app wrote. Minitest stands
  # in for an installed gem.
  class MixesInAGem
    include Minitest::Assertions

    def lookup(id) = { "id" => id }
  end

  class FromAGemBase < Minitest::Test
    def self.report(day) = "report #{day}"
    def search(query) = [query]
  end

  def test_library_code_is_never_exposed
    assert_equal %i[lookup], offline(MixesInAGem.new).exposed_functions
    assert_equal %i[report], offline(FromAGemBase).exposed_functions
    assert_equal %i[search], offline(FromAGemBase.new("x")).exposed_functions
    e = assert_raises(Glovebox::ConfigError) { offline(MixesInAGem.new, only: %i[lookup capture_subprocess_io]) }
    assert_match(/capture_subprocess_io is not an exposable function/, e.message)
    [Dir, Marshal, GC, ObjectSpace, Process, Ractor, TracePoint, Time, Kernel, Minitest::Assertions].each do |mod|
      e = assert_raises(Glovebox::ConfigError, mod.inspect) { offline(mod) }
      assert_match(/exposes no functions/, e.message)
    end
  end

  # The gem's own examples/ are scripts a user runs where they are
  # installed: their classes are the app's, though the gem sits under a
  # Gem.path directory; a class in another file of that gem stays library
  # code.
  def test_the_gems_own_examples_are_app_code
    require "minitest/mock"
    root = File.expand_path("..", __dir__) # ruby/: the gem's root
    eval("class ExposureExampleShop; def orders = [1]; end", TOPLEVEL_BINDING, File.join(root, "examples", "shop.rb"), 1)
    eval("class ExposureGemShop; def orders = [1]; end", TOPLEVEL_BINDING, File.join(root, "lib", "shop.rb"), 1)
    Gem.stub(:path, [File.dirname(root)]) do
      assert_equal %i[orders], offline(ExposureExampleShop.new).exposed_functions
      e = assert_raises(Glovebox::ConfigError) { offline(ExposureGemShop.new) }
      assert_match(/exposes no functions/, e.message)
    end
  end

  # What a Hash's lambda returns crosses as data or not at all: a Proc,
  # Method, Class or IO is refused (the guest gets TypeError, rescuable),
  # and the tool is not called again for it.
  def test_a_tool_returning_host_objects_hands_over_nothing
    returns = { "a_proc" => -> { -> { `id` } }, "a_method" => -> { Kernel.method(:system) },
                "a_class" => -> { File }, "an_io" => -> { $stdout }, "env" => -> { ENV } }
    sb = Glovebox::Sandbox.new(tools: returns, client: executor.client)
    r = sb.eval(<<~RUBY)
      %w[a_proc a_method a_class an_io env].map do |n|
        begin
          Glovebox.call(n).class.name
        rescue TypeError => e
          e.message[/cannot cross/] ? "refused" : e.message
        end
      end
    RUBY
    assert_equal "ok", r.status, r.error.inspect
    assert_equal ["refused"] * 5, r.value
    assert_equal ["error"] * 5, r.tool_calls.map(&:outcome)
  end
end
