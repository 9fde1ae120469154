# frozen_string_literal: true

# Enclave's API on glovebox: `require "glovebox/enclave"` in place of
# `require "enclave"` gives a class Enclave with the enclave gem's
# documented constructor, limits, exposure rules, hooks, results and
# errors, running the code as full CRuby 4.0 in glovebox's wasm sandbox
# (embedded, or on an executor when Glovebox.executor is set) instead of
# mruby in this process. docs/ruby.md, "From Enclave", lists what differs.
require "glovebox"

if defined?(::Enclave) && !(::Enclave.is_a?(Class) && ::Enclave.const_defined?(:GLOVEBOX, false))
  raise LoadError, "glovebox/enclave defines Enclave, and the enclave gem (or another Enclave) is loaded already: " \
                   "require one of them"
end

# Evaluates Ruby that a model (or a user) wrote, with the functions you
# expose as its only way out; state lasts from one eval to the next.
#
#   enclave = Enclave.new(tools: CustomerServiceTools.new(user), timeout: 5)
#   enclave.eval('user_info()["plan"]').value   #=> "\"basic\""
#
# Each Enclave is a glovebox session (a VM kept between evals) opened at
# its first eval and closed by #close (or when it is garbage collected).
# Not for concurrent use: one Enclave per request or job.
class Enclave
  # Marks this Enclave as glovebox's.
  GLOVEBOX = true

  # Base of the errors an eval raises for a limit; the enclave stays
  # usable after any of them (its state starts afresh: glovebox discards
  # a VM a limit stopped).
  class Error < StandardError; end
  # timeout: ran out.
  class TimeoutError < Error; end
  # memory_limit: ran out (or the guest raised NoMemoryError).
  class MemoryLimitError < Error; end
  # max_instructions: ran out.
  class InstructionLimitError < Error; end
  # max_tool_calls: or max_tool_seconds: ran out.
  class ToolBudgetError < Error; end

  # max_output_bytes when neither the Enclave nor the class sets it.
  DEFAULT_MAX_OUTPUT_BYTES = 10 * 1024 * 1024
  # What max_output_bytes: nil (unlimited) keeps: 32 MiB, half the
  # embedded protocol's 64 MiB frame, which carries the output.
  OUTPUT_CEILING = 32 * 1024 * 1024
  # Fuel units per max_instructions: instruction. An mruby instruction
  # does about what a CRuby VM instruction does, and glovebox's fuel
  # counts wasm instructions: a 1M-iteration `i += 1 while i < n` loop
  # is about 5 VM instructions an iteration and 5.1e8 fuel
  # (glovebox.Limits.Fuel), so about 100 fuel an instruction.
  FUEL_PER_INSTRUCTION = 100
  # The settings, each with a class-level default (Enclave.timeout = 5).
  SETTINGS = %i[timeout memory_limit max_instructions max_output_bytes max_tool_calls max_tool_seconds].freeze

  UNSET = Object.new.freeze
  private_constant :UNSET

  class << self
    attr_accessor :timeout, :memory_limit, :max_instructions, :max_tool_calls, :max_tool_seconds
    attr_writer :max_output_bytes

    # The class-level max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES until set
    # (nil: unlimited, up to OUTPUT_CEILING).
    def max_output_bytes = defined?(@max_output_bytes) ? @max_output_bytes : DEFAULT_MAX_OUTPUT_BYTES

    # Yields a new Enclave (arguments as new's) and closes it afterwards;
    # returns the block's value.
    def open(**opts)
      enclave = new(**opts)
      begin
        yield enclave
      ensure
        enclave.close
      end
    end

    # @private Sessions of Enclaves collected without #close, closed at
    # the next eval of any Enclave.
    def orphans = @orphans ||= Queue.new
  end

  attr_reader(*SETTINGS)
  attr_reader :before_tool_call, :after_tool_call, :error_sanitizer

  # tools: an object whose public methods become functions (or a Module
  # of them; see #expose). Limits (each defaulting to the class's, nil
  # taking glovebox's own default): timeout: seconds of wall clock
  # (default 10), memory_limit: bytes the code may allocate beyond the
  # booted VM (glovebox memory = Glovebox::Exposure::MEMORY_FLOOR +
  # memory_limit; default 512 MiB of linear memory), max_instructions:
  # (FUEL_PER_INSTRUCTION fuel each; default none), max_output_bytes:
  # (captured output kept, then truncated; nil: OUTPUT_CEILING),
  # max_tool_calls: per eval (default 1000), max_tool_seconds: per eval
  # (default the timeout). before_tool_call: ->(name, args) (raising
  # vetoes the call), after_tool_call: ->(name, args, result),
  # error_sanitizer: ->(name, exception) { "message" }. Raises
  # ArgumentError for a limit that is not a positive number, a hook of
  # another shape, or a tools object #expose refuses.
  def initialize(tools: nil, timeout: UNSET, memory_limit: UNSET, max_instructions: UNSET, max_output_bytes: UNSET,
                 max_tool_calls: UNSET, max_tool_seconds: UNSET, before_tool_call: nil, after_tool_call: nil,
                 error_sanitizer: nil)
    given = { timeout: timeout, memory_limit: memory_limit, max_instructions: max_instructions,
              max_output_bytes: max_output_bytes, max_tool_calls: max_tool_calls, max_tool_seconds: max_tool_seconds }
    given.each do |k, v|
      v = self.class.public_send(k) if v.equal?(UNSET)
      unless v.nil? || (v.is_a?(Numeric) && v.finite? && v.positive? && (%i[timeout max_tool_seconds].include?(k) || v.is_a?(Integer)))
        raise ArgumentError, "#{k}: #{v.inspect} is not a positive #{%i[timeout max_tool_seconds].include?(k) ? "number" : "Integer"} (or nil)"
      end

      instance_variable_set(:"@#{k}", v)
    end
    @functions = {}
    @sources = {}
    @host_tools = [] # [tools, only, except] run by the glovebox child (Enclave::HttpTool)
    @holder = [] # the open session, shared with the finalizer
    @closed = false
    self.before_tool_call = before_tool_call
    self.after_tool_call = after_tool_call
    self.error_sanitizer = error_sanitizer
    expose(tools) unless tools.nil?
    ObjectSpace.define_finalizer(self, Enclave.reaper(@holder))
  end

  # @private The finalizer: an Enclave collected without #close leaves
  # its session to be closed by the next eval.
  def self.reaper(holder) = proc { holder.each { orphans << _1 } }

  # Sets the hook run before each tool call, ->(name, args) (or
  # glovebox's ->(name, args, kwargs)); raising in it vetoes the call
  # (the guest gets the message). nil removes it.
  def before_tool_call=(fn)
    @before_tool_call = hook(:before_tool_call, fn)
    @sandbox&.before_tool_call = fn
  end

  # Sets the hook run after each tool call that returned, ->(name, args,
  # result); nil removes it.
  def after_tool_call=(fn)
    @after_tool_call = hook(:after_tool_call, fn)
    @sandbox&.after_tool_call = fn
  end

  # Sets the sanitizer of tool errors, ->(name, exception) { String }:
  # what the code sees of an exception your tool raised (the class it
  # sees is then Glovebox::ToolError); nil or a raise: "tool call failed".
  # A before_tool_call veto is not sanitized.
  def error_sanitizer=(fn)
    @error_sanitizer = hook(:error_sanitizer, fn)
  end

  # Makes obj's public methods functions in the enclave: an object's (its
  # class's own, up to the first class Ruby defines), or a Module's
  # instance methods (as Enclave extends its context with the module;
  # a module of module_function's exposes those). only: keeps the named
  # methods, except: drops them; an enclave_tool_methods (or
  # glovebox_tool_methods) the object defines is a hard ceiling. Raises
  # ArgumentError for a name in only:/except: that is not an exposable
  # method, for a name glovebox reserves (format, select, puts, ...) and
  # for a name exposed already. Exposing after the first eval starts the
  # enclave's state afresh (its session has the tools it was opened
  # with). Returns self.
  def expose(obj, only: nil, except: nil)
    host = defined?(Glovebox::HostTools) && obj.is_a?(Glovebox::HostTools)
    target = obj.is_a?(Module) && !obj.is_a?(Class) && !obj.public_instance_methods(false).empty? ? Object.new.extend(obj) : obj
    fns = Glovebox::Exposure.functions(target, only: only, except: except)
    twice = fns.keys & @functions.keys
    raise ArgumentError, "#{twice.join(", ")}: exposed already (by #{@sources[twice.first]})" unless twice.empty?

    what = Glovebox::Exposure.describe(obj)
    fns.each do |name, fn|
      @functions[name] = host ? nil : wrap(name, fn) # a host tool's run by the Sandbox, as it runs them
      @sources[name] = what
    end
    @host_tools << [obj, only, except] if host
    drop_session
    self
  rescue Glovebox::ConfigError => e
    raise ArgumentError, e.message
  end

  # The function names the code can call (Array of Symbol), in the order
  # they were exposed: an only: list's order, else sorted per object.
  def exposed_functions = @functions.keys

  # Runs code and returns a Result (value: the last expression's
  # inspect; output: what it printed; error: "Class: message" for an
  # exception it raised, which is a Result too). Local variables,
  # methods, instance variables and `_` (the last value) last until
  # #reset!. Raises TimeoutError, MemoryLimitError,
  # InstructionLimitError or ToolBudgetError for a limit (the enclave
  # stays usable, its state afresh), Enclave::Error when the sandbox
  # failed, RuntimeError "enclave is closed" after #close, TypeError for
  # code that is not a String.
  def eval(code)
    raise "enclave is closed" if @closed
    raise TypeError, "eval needs the code as a String, got #{code.class}" unless code.is_a?(String) || code.respond_to?(:to_str)

    reap
    r = begin
      session.eval(code)
    rescue Glovebox::RunError => e
      raise unless e.code == "not_found" # the session idled out or its child restarted: state starts afresh

      drop_session
      session.eval(code)
    end
    result_for(r)
  end

  # Forgets everything the code defined (variables, methods, `_`); the
  # exposed functions stay. Returns self.
  def reset!
    raise "enclave is closed" if @closed

    drop_session
    self
  end

  # Ends the enclave (its session is closed); eval raises afterwards.
  # Idempotent.
  def close
    return if @closed

    @closed = true
    drop_session
    nil
  end

  def closed? = @closed

  def inspect = "#<Enclave functions=#{exposed_functions.inspect}#{@closed ? " closed" : ""}>"

  # What one eval did, as Enclave reports it: +value+ the last
  # expression's inspect (nil after an error), +output+ what it printed
  # (stdout), +error+ "Class: message" or nil. #glovebox_result is
  # glovebox's whole Result (tool transcript, stderr, timing).
  class Result
    attr_reader :value, :output, :error, :glovebox_result

    def initialize(value:, output:, error:, glovebox_result: nil)
      @value = value
      @output = output
      @error = error
      @glovebox_result = glovebox_result
    end

    def error? = !@error.nil?

    # "=> value", after the output when there is any; "Error: ..." for
    # an error: what a model reads back (Enclave::Tool.call).
    def to_s
      return "Error: #{@error}" if error?

      @output.empty? ? "=> #{@value}" : "#{@output}=> #{@value}"
    end

    def inspect = "#<#{self.class} value=#{@value.inspect} output=#{@output.inspect} error=#{@error.inspect}>"
  end

  # The enclave as one tool of an LLM library: definition (an OpenAI-style
  # function definition of eval_ruby) and call(enclave, code:) (the
  # String the model reads: Result#to_s).
  module Tool
    def self.definition
      { type: "function",
        function: { name: "eval_ruby",
                    description: "Evaluate Ruby code in a sandbox (CRuby 4.0 in WebAssembly). State persists between calls: " \
                                 "local variables, methods and instance variables (@x) carry over, and _ holds the last value. " \
                                 "The functions the host exposes are the only way out: no network, no processes, no host files.",
                    parameters: { type: "object", properties: { code: { type: "string", description: "Ruby code to evaluate" } },
                                  required: ["code"] } } }
    end

    # Evaluates code in enclave and returns what the model reads. A limit
    # raises, as Enclave#eval does.
    def self.call(enclave, code:) = enclave.eval(code).to_s
  end

  private

  # fn, once glovebox accepts its shape for kind (ArgumentError if not).
  def hook(kind, fn)
    Glovebox::Exposure.hook(kind, fn)
    fn
  rescue Glovebox::ConfigError => e
    raise ArgumentError, e.message
  end

  # The Sandbox for the exposed functions and limits (remade when
  # they change) and its open session.
  def session
    return @holder.first if @holder.first

    @sandbox ||= begin
      own = @functions.compact
      sb = Glovebox::Sandbox.new(tools: own.empty? ? nil : own, **glovebox_limits,
                                 before_tool_call: @before_tool_call, after_tool_call: @after_tool_call)
      @host_tools.each { |tools, only, except| sb.expose(tools, only: only, except: except) }
      sb.guest_code!(capture: true)
    end
    s = begin
      @sandbox.session
    rescue Glovebox::APIError => e
      raise unless e.code == "queue_full"

      reap(force: true)
      @sandbox.session
    end
    @holder.replace([s])
    s
  end

  def glovebox_limits
    { timeout: @timeout, memory: @memory_limit && Glovebox::Exposure::MEMORY_FLOOR + @memory_limit,
      fuel: @max_instructions && @max_instructions * FUEL_PER_INSTRUCTION,
      output: @max_output_bytes || OUTPUT_CEILING, tool_calls: @max_tool_calls, tool_time: @max_tool_seconds }.compact
  end

  def drop_session
    s = @holder.first
    @holder.clear
    @sandbox = nil
    s&.close
  rescue Glovebox::Error
    nil # a child that is gone has closed it
  end

  # Closes the sessions of Enclaves collected without #close.
  def reap(force: false)
    q = Enclave.orphans
    return if q.empty? && !force

    GC.start if force && q.empty?
    until q.empty?
      begin
        q.pop(true).close
      rescue ThreadError
        break
      rescue Glovebox::Error
        nil
      end
    end
  end

  def result_for(r)
    case r.status.to_s
    when "ok" then Result.new(value: r.value.to_s, output: r.stdout, error: nil, glovebox_result: r)
    when "error"
      raise MemoryLimitError, "NoMemoryError" if r.error.class_name == "NoMemoryError"

      Result.new(value: nil, output: r.stdout, error: r.error.to_s, glovebox_result: r)
    when "timeout" then raise TimeoutError, "execution timeout exceeded"
    when "memory_limit" then raise MemoryLimitError, "NoMemoryError"
    when "fuel_exhausted" then raise InstructionLimitError, "instruction limit exceeded"
    when "tool_budget_exceeded"
      spent = r.tool_calls.reverse.find { _1.outcome == "budget_exceeded" }
      if spent&.error.to_s.include?("tool_time")
        raise ToolBudgetError, "tool-call time budget exceeded (max #{@max_tool_seconds || @timeout || 10}s)"
      end

      raise ToolBudgetError, "tool-call count budget exceeded (max #{@max_tool_calls || Glovebox.config.tool_calls || 1000})"
    else raise Error, "the sandbox failed (#{r.status}): #{r.error}"
    end
  end

  # fn, as the enclave calls it: its value must cross (TypeError
  # "unsupported type for sandbox: User" otherwise), and its exception
  # reaches the code as the same class name (Glovebox::RuntimeError, a
  # Glovebox::ToolError; ArgumentError and TypeError as themselves) with
  # its message, or sanitized.
  def wrap(name, fn)
    enclave = self
    lambda do |*args, **kw|
      value = kw.empty? ? fn.call(*args) : fn.call(*args, **kw)
      bad = Enclave.unsupported(value)
      raise Glovebox::GuestCode::Raised.new("unsupported type for sandbox: #{bad}", "TypeError") if bad

      value
    rescue Glovebox::ToolError
      raise
    rescue StandardError => e
      san = enclave.error_sanitizer
      raise Glovebox::GuestCode::Raised.new(e.message, Glovebox::GuestCode.class_leaf(e)) unless san

      msg = begin
        san.call(name, e)
      rescue StandardError
        nil
      end
      raise Glovebox::GuestCode::Raised.new(msg.nil? ? "tool call failed" : msg.to_s, "ToolError")
    end
  end

  # @private The class name of the first part of v that cannot cross, or
  # nil.
  def self.unsupported(v, depth = 0)
    return "(nested deeper than #{Glovebox::Value::MAX_DEPTH})" if depth > Glovebox::Value::MAX_DEPTH

    case v
    when nil, true, false, Integer, Float, String, Symbol then nil
    when Array then v.each { |x| (c = unsupported(x, depth + 1)) && (return c) } && nil
    when Hash
      v.each do |k, x|
        return k.class.name unless k.is_a?(String) || k.is_a?(Symbol) || k.is_a?(Integer)
        (c = unsupported(x, depth + 1)) && (return c)
      end
      nil
    when Struct then unsupported(v.to_h, depth)
    else v.class.name || v.class.inspect
    end
  end
end
