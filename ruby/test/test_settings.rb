# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"

# Safety settings fail closed: a name that gates or pauses nothing, a
# hook the gem would call with the wrong arguments, a reserved name or a
# memory limit the executor would refuse later are refused when the
# Sandbox is built (issue 33, item 3).
class SettingsTest < Minitest::Test
  include ExecutorHarness

  def offline(tools = DeskTools.new, **opts)
    Glovebox::Sandbox.new(tools: tools, executor: "https://127.0.0.1:9", token: "gbx_x", **opts)
  end

  def test_approval_typo_refused
    sb = offline
    e = assert_raises(Glovebox::ConfigError) { sb.require_approval(:change_pln) { true } }
    assert_match(/require_approval: change_pln is not an exposed function \(exposed: blob, change_plan, customer/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline(needs_approval: %i[chnge_plan]) }
    assert_match(/needs_approval: chnge_plan is not an exposed function/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline(suspend: %i[change_plan ordrs]) }
    assert_match(/suspend: ordrs is not an exposed function/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline(nil, needs_approval: %i[refund]) }
    assert_match(/expose the tools first/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline.eval("1", suspend: %i[nope]) }
    assert_match(/suspend: nope is not an exposed function/, e.message)
    # Names that are exposed are taken, as Symbols or Strings.
    assert_same sb, sb.require_approval("change_plan", :explode) { true }
  end

  def test_hook_of_another_shape_refused_when_set
    e = assert_raises(Glovebox::ConfigError) { offline(before_tool_call: ->(name) { name }) }
    assert_match(/before_tool_call: a callable taking \(name\) cannot be called as \(name, args, kwargs\) or Enclave's \(name, args\)/, e.message)
    e = assert_raises(Glovebox::ConfigError) { offline(after_tool_call: ->(a, b, c, d, e) { [a, b, c, d, e] }) }
    assert_match(/after_tool_call: .*\(name, args, kwargs, result\) or Enclave's \(name, args, result\)/, e.message)
    assert_raises(Glovebox::ConfigError) { offline(before_tool_call: ->(name, args, kwargs, strict:) { [name, args, kwargs, strict] }) }
    assert_raises(Glovebox::ConfigError) { offline(error_sanitizer: ->(e) { e }) }
    assert_raises(Glovebox::ConfigError) { offline(approver: "yes") }
    sb = offline
    assert_raises(Glovebox::ConfigError) { sb.before_tool_call = ->(a, b, c, d) { [a, b, c, d] } }
    assert_raises(Glovebox::ConfigError) { sb.after_tool_call = ->(a) { a } }
    assert_raises(Glovebox::ConfigError) { sb.require_approval(:change_plan) { |a, b, c, d, e| [a, b, c, d, e] } }
    assert_nil sb.before_tool_call # a refused hook leaves the old one
  end

  # Enclave's hooks, ->(name, args) and ->(name, args, result), run with
  # the arguments they name; so do the documented ones and procs with
  # optional or splat parameters.
  def test_hooks_of_every_accepted_shape_run
    seen = Hash.new { |h, k| h[k] = [] }
    shapes = {
      enclave: [->(name, args) { seen[:before2] << [name, args] }, ->(name, args, result) { seen[:after3] << [name, args, result] }],
      documented: [->(name, args, kwargs) { seen[:before3] << [name, args, kwargs] },
                   ->(name, args, kwargs, result) { seen[:after4] << [name, args, kwargs, result] }],
      splat: [->(*all) { seen[:before_splat] << all }, ->(name, *rest) { seen[:after_splat] << [name, *rest] }],
      optional: [->(name, args, kwargs = :none) { seen[:before_opt] << [name, args, kwargs] },
                 proc { |name, args, result| seen[:after_proc3] << [name, args, result] }],
    }
    shapes.each_value do |before, after|
      r = sandbox(DeskTools.new, before_tool_call: before, after_tool_call: after).eval('change_plan("pro")')
      assert_equal "plan is pro", r.value, r.error.inspect
    end
    assert_equal [[:change_plan, ["pro"]]], seen[:before2]
    assert_equal [[:change_plan, ["pro"], "plan is pro"]], seen[:after3]
    assert_equal [[:change_plan, ["pro"], {}]], seen[:before3]
    assert_equal [[:change_plan, ["pro"], {}, "plan is pro"]], seen[:after4]
    assert_equal [[:change_plan, ["pro"], {}]], seen[:before_splat]
    assert_equal [[:change_plan, ["pro"], {}, "plan is pro"]], seen[:after_splat]
    assert_equal [[:change_plan, ["pro"], {}]], seen[:before_opt]
    assert_equal [[:change_plan, ["pro"], "plan is pro"]], seen[:after_proc3]
  end

  def test_enclave_veto_hook_vetoes_only_what_it_means
    sb = sandbox(DeskTools.new, before_tool_call: ->(name, args) { raise "no free plans" if name == :change_plan && args == ["free"] })
    r = sb.eval('[(change_plan("free") rescue $!.message), change_plan("pro")]')
    assert_equal ["no free plans", "plan is pro"], r.value
  end

  def test_reserved_names_refused_at_construction
    %w[dig format puts each call it _1 __x j to_h coerce].each do |n|
      tools = Class.new do
        define_method(n) { |*a| a }
        define_method(:lookup) { |x| x }
      end.new
      e = assert_raises(Glovebox::ConfigError, n) { offline(tools) }
      assert_match(/ #{Regexp.escape(n)} (would shadow|is a|names a|starts with)/, e.message)
      assert_match(/leave it out with except:/, e.message)
      assert_equal %i[lookup], offline(tools, except: [n]).exposed_functions
    end
    # Overrides of Object's own public methods (to_s, inspect, send,
    # ==) and the methods Ruby calls itself are never tools: left out.
    tools = Class.new do
      def to_s = "tools"
      def inspect = "#<tools>"
      def send(*) = nil
      def method_missing(*) = nil
      def lookup(x) = x
    end.new
    assert_equal %i[lookup], offline(tools).exposed_functions
    e = assert_raises(Glovebox::ConfigError) { offline(tools, only: %i[to_s]) }
    assert_match(/only: to_s is not an exposable function .*\(exposable: lookup\)/, e.message)
  end

  def test_memory_below_the_floor_refused_at_construction
    e = assert_raises(Glovebox::ConfigError) { offline(memory: 256 << 20) }
    assert_match(/memory: 268435456 bytes is below the #{Glovebox::Exposure::MEMORY_FLOOR}-byte floor/, e.message)
    assert offline(memory: Glovebox::Exposure::MEMORY_FLOOR)
    assert_raises(Glovebox::ConfigError) { offline(timeout: -1) }
    assert_raises(Glovebox::ConfigError) { offline(timeout: "5") }
    assert_raises(Glovebox::ConfigError) { offline(tool_calls: 1.5) }
  end

  # The floor the gem states is the executor's: an eval at the floor
  # runs, one byte below it would be refused there too.
  def test_memory_floor_is_the_executors
    r = sandbox(memory: Glovebox::Exposure::MEMORY_FLOOR).eval("1 + 1")
    assert_equal "ok", r.status, r.error.inspect
  end

  def test_eval_of_nil_or_non_string_refused
    sb = offline
    e = assert_raises(TypeError) { sb.eval(nil) }
    assert_match(/eval needs the program's source as a String, got nil/, e.message)
    e = assert_raises(TypeError) { sb.eval(42) }
    assert_match(/got Integer/, e.message)
    assert_raises(TypeError) { sb.eval(:code) }
  end
end
