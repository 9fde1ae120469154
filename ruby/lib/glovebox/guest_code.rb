# frozen_string_literal: true

require "securerandom"

module Glovebox
  # Ruby the gem sends into the guest around an eval's code, for the
  # seeds' spellings that need something in the guest: SB.call (the host
  # call of security_box's rpcs and of RubyLLM code mode's tools) and
  # Enclave's `_` (the last value). Nothing here is trusted: the guest may
  # redefine all of it, and the host checks every call it makes as it
  # checks any other.
  #
  # The code runs as it would without the wrapper: in the top-level
  # binding, as file "sandbox" from line 1 (so __LINE__, backtraces and
  # syntax errors are the code's own), its locals kept in a session. SB
  # is evaluated as "<glovebox>", whose frames the guest leaves out of
  # backtraces, and the frames below the code are dropped.
  module GuestCode
    # SB: security_box's guest module. SB.call(name, args = {}, **kw)
    # calls the host tool (or rpc) bound under name with the arguments
    # as keywords and returns its answer with Hash keys as Symbols, each
    # Hash also answering its keys as methods (result[:text],
    # result.items.first.path); SB::ToolError is a failure of the tool
    # (class and message only), SB::UnknownTool a name nothing is bound
    # under; SB.tools lists the names.
    SB_SOURCE = <<~'RUBY'
      module SB
        class ToolError < StandardError; end
        class UnknownTool < ToolError; end

        # A Hash from the host: Symbol keys ([] takes Strings too), each
        # key a reader method.
        class Record < ::Hash
          def [](key) = super(::String === key ? key.to_sym : key)
          def method_missing(name, *args) = args.empty? && key?(name) ? self[name] : super
          def respond_to_missing?(name, priv = false) = key?(name) || super
        end

        @names = {}

        class << self
          # The names bound (Array of String).
          def tools = @names.keys

          def call(name, args = nil, **kwargs)
            unless args.nil? || args.is_a?(::Hash)
              raise ::ArgumentError, "SB.call(name, args): args is a Hash of arguments, not #{args.class}"
            end
            tool = @names[name.to_s]
            unless tool
              known = @names.empty? ? "none are bound" : "bound: #{@names.keys.join(", ")}"
              raise UnknownTool, "no host tool named #{name.to_s.inspect} (#{known})"
            end
            all = (args || {}).merge(kwargs).to_h { |k, v| [k.to_sym, v] }
            __record(::Glovebox.call(tool, **all))
          rescue ::Glovebox::UnknownToolError => e
            raise UnknownTool, e.message
          rescue ::Glovebox::ToolError, ::TypeError, ::ArgumentError => e
            raise if e.is_a?(ToolError)
            raise ToolError, "#{e.class.name.to_s.delete_prefix("Glovebox::")}: #{e.message}"
          end

          def __names=(names)
            @names = names
          end

          def __record(v)
            case v
            when ::Hash then v.each_with_object(Record.new) { |(k, x), h| h[k.is_a?(String) ? k.to_sym : k] = __record(x) }
            when ::Array then v.map { |x| __record(x) }
            else v
            end
          end
        end
      end
    RUBY

    module_function

    # code, wrapped. sb: nil for no SB, or the Hash of names SB.call
    # takes (String => the guest function it calls): SB is defined for a
    # program whose text names it (compiling SB costs a fresh VM about
    # 2.7e6 fuel, 1.2 ms measured: an eval calling SB.call once took
    # 1.8-2.0 ms p50 against 0.64-0.71 ms for the same call as a plain
    # function). capture: the value is kept
    # in `_` (a local that lasts in a session) and the eval's value is its
    # inspect (Enclave's Result#value).
    #
    # The code is evaluated by Binding#eval in TOPLEVEL_BINDING, as file
    # "sandbox" from line 1; a failure's backtrace loses the frames of the
    # wrapper around it (the eval's own caller and Binding#eval itself).
    # The wrapper defines no local but `_` with capture.
    def wrap(code, sb: nil, capture: false)
      head = +""
      if sb && code.include?("SB")
        src_end = "GLOVEBOX_SETUP_#{SecureRandom.hex(8)}"
        head << "eval(<<'#{src_end}', TOPLEVEL_BINDING, \"<glovebox>\", 1) unless defined?(::SB); ::SB.__names = #{sb.inspect}.freeze; "
      end
      code_end = "GLOVEBOX_CODE_#{SecureRandom.hex(8)}"
      head << "#{capture ? "_ = " : ""}begin; ::TOPLEVEL_BINDING.eval(<<'#{code_end}', \"sandbox\", 1); " \
              "rescue ::Exception; $!.set_backtrace($!.backtrace[0, $!.backtrace.size - ::Kernel.caller(0).size - 1]) if " \
              "$!.backtrace.is_a?(::Array) && $!.backtrace.size > ::Kernel.caller(0).size; ::Kernel.raise; end\n"
      head << "#{SB_SOURCE}#{src_end}\n" if src_end
      "#{head}#{code}\n#{code_end}\n#{capture ? "_.inspect\n" : ""}"
    end

    # Raised by the gem's own adapters (rpcs, bound RubyLLM tools,
    # Enclave's tools) to have the guest raise the host exception's class
    # name (Glovebox::<Name>, a Glovebox::ToolError) with its message;
    # "ArgumentError" and "TypeError" are raised as Ruby's own.
    class Raised < ToolError
      def initialize(message, guest_class)
        @guest_name = guest_class.to_s
        super(message)
      end

      def guest_class
        @guest_name.match?(/\A[A-Z][A-Za-z0-9_]{0,63}\z/) ? @guest_name : "ToolError"
      end
    end

    # A guest function name for the SB.call target name (any String),
    # not among taken (a Hash keyed by Symbol): name itself when it is a
    # name glovebox takes (Exposure.name_problem), else "sb_" and its
    # letters, digits and underscores, numbered when that is taken.
    def function_name(name, taken)
      n = name.to_s
      return n.to_sym if Exposure.name_problem(n).nil? && !taken.key?(n.to_sym)

      base = "sb_#{n.downcase.gsub(/[^a-z0-9_]+/, "_").gsub(/\A_+|_+\z/, "")}"
      cand = base
      i = 1
      cand = "#{base}_#{i += 1}" while taken.key?(cand.to_sym) || Exposure.name_problem(cand)
      cand.to_sym
    end

    # The last part of e's class name (RuntimeError, RecordNotFound).
    def class_leaf(e) = e.class.name.to_s.split("::").last.to_s

    # v as JSON would carry it: Hashes (String keys), Arrays, Strings,
    # numbers, true, false, nil; a Symbol as its name; anything else as
    # its inspect String (security_box's and RubyLLM code mode's rule).
    def json_safe(v, depth = 0)
      return v.inspect if depth > Value::MAX_DEPTH

      case v
      when nil, true, false, Integer, String then v
      when Float then v.finite? ? v : v.to_s
      when Symbol then v.name
      when Hash then v.each_with_object({}) { |(k, x), h| h[k.is_a?(Symbol) ? k.name : k.to_s] = json_safe(x, depth + 1) }
      when Array then v.map { |x| json_safe(x, depth + 1) }
      when Struct then json_safe(v.to_h, depth)
      else v.inspect
      end
    end
  end
end
