# frozen_string_literal: true

module Glovebox
  # Tools glovebox runs in the embedded child for this process, with Go's
  # rules (docs/embedded.md, "Host tools"): the HTTP tool (HttpTool) and
  # the tools of MCP servers (Sandbox.new(mcp: ...)). Each is bound in the
  # child once (the bind request) and its functions are exposed in a
  # Sandbox like your own methods: a guest's call of one comes back to
  # this process as any tool call does, so hooks, approval, budgets,
  # the sanitizer and the transcript see it, and then the child runs it
  # (the call request). A child started anew (a fork, a crash) gets it
  # bound again at its next call.
  #
  # Host tools exist embedded only: through an executor, the network and
  # MCP servers are the operator's, declared in its eval profiles
  # (profile:).
  class HostTools
    # The guest function names (Strings), the child's docs for code mode
    # ({"name", "description", "params", ...} by name) and, for MCP, the
    # servers' notes; read after the first bind.
    attr_reader :names, :docs, :servers

    # spec: the bind request's body ({"http" => {...}} or {"mcp" =>
    # [...]}); what: how messages name the setting ("Glovebox::HttpTool",
    # "mcp:").
    def initialize(spec, what)
      @spec = spec
      @what = what
      @mutex = Mutex.new
      @bound = nil # [Child, answer]
    end

    # Binds in the child now (starting it), so a bad setting raises here,
    # at construction: ConfigError with the child's reason.
    def bind! = handle(Child.current)

    # The functions to expose: {Symbol => HostFunction}.
    def functions = @names.to_h { |n| [n.to_sym, HostFunction.new(self, n)] }

    # @private The handle of these tools in child, binding them there
    # first if need be.
    def handle(child)
      @mutex.synchronize do
        return @bound[1]["handle"] if @bound && @bound[0].equal?(child)

        ans = begin
          child.request({ "op" => "bind", "bind" => @spec })
        rescue APIError => e
          raise ConfigError, "#{@what}: #{translate(e.message.sub(/\Aglovebox: \w+: /, ""))}"
        end
        @bound = [child, ans]
        @names = ans["tools"].map { _1["name"] }
        @docs = ans["tools"].to_h { [_1["name"], _1] }
        @servers = ans["servers"] || []
        @mcp_names = ans["names"] || {}
        ans["handle"]
      end
    end

    # @private Forgets the binding in child (it dropped it).
    def forget(child) = @mutex.synchronize { @bound = nil if @bound && @bound[0].equal?(child) }

    # @private The MCP server a guest name belongs to ("server/tool"), or
    # nil.
    def origin(name) = @mcp_names && @mcp_names[name]

    # @private Called with the answer of each call (HttpTool reports its
    # requests).
    def observe(_answer); end

    # @private The child's refusal of a bind, in this setting's words.
    def translate(message) = message

    # @private Drops the binding in the running child (MCP servers stop).
    def unbind
      child, ans = @mutex.synchronize { @bound.tap { @bound = nil } }
      return unless child && Child.running.equal?(child)

      child.request({ "op" => "unbind", "handle" => ans["handle"] })
    rescue APIError
      nil
    end
  end

  # The guest failed in a host tool (the child's err frame): the class
  # the guest sees is +guest_class+ (HTTPBlockedAddressError,
  # MCPTransportError, ToolPayloadError, ...).
  class HostToolError < ToolError
    attr_reader :guest_class

    def initialize(guest_class, message)
      @guest_class = guest_class
      super(message)
    end
  end

  # @private A host tool's call ended the eval (the child's abort frame:
  # its time ran out).
  class HostToolAbort < Error
    attr_reader :status

    def initialize(status, message)
      @status = status
      super(message)
    end
  end

  # One guest function of HostTools: called by Sandbox with the call's
  # deadline; runs in the child.
  class HostFunction
    attr_reader :tools, :name

    def initialize(tools, name)
      @tools = tools
      @name = name
    end

    # Runs the call in the child and returns its value as Ruby data.
    # due: the monotonic time the call must end by (nil: none). Raises
    # HostToolError for the tool's error, HostToolAbort when its time
    # ran out.
    def call_until(due, pos, kw)
      args = Value.dump([pos, kw])
      tries = 0
      begin
        child = Child.current
        q = { "handle" => @tools.handle(child), "name" => @name, "args" => args }
        q["timeout_us"] = [((due - Process.clock_gettime(Process::CLOCK_MONOTONIC)) * 1e6).floor, 0].max if due
        ans = child.request({ "op" => "call", "call" => q })
      rescue APIError => e
        raise unless e.code == "unknown_handle" && (tries += 1) == 1

        @tools.forget(child)
        retry
      end
      @tools.observe(ans)
      HostFunction.decode(ans["reply"].to_s)
    end

    # Called as a plain callable (Exposure.params, a direct call): no
    # deadline.
    def call(*pos, **kw) = call_until(nil, pos, kw)

    # The parameters, for code mode: the child's doc's.
    def parameters = [[:rest, :args], [:keyrest, :kwargs]]

    # A reply frame (EXECUTOR.md, tool-results) as Ruby data, or the
    # error it carries raised.
    def self.decode(frame)
      kind, rest = frame.split("\n", 2)
      case kind
      when "n" then nil
      when "t" then true
      when "f" then false
      when "s" then rest.to_s.force_encoding(Encoding::UTF_8)
      when "i" then Integer(rest, 10)
      when "j" then Value.load(rest.to_s)
      when "err"
        klass, msg = rest.to_s.split("\n", 2)
        raise HostToolError.new(klass.to_s, msg.to_s)
      when "abort"
        status, msg = rest.to_s.split("\n", 2)
        raise HostToolAbort.new(status.to_s, msg.to_s)
      else
        raise ChildError, "broke the embedded protocol: a host tool's reply frame of kind #{kind.inspect}"
      end
    end
  end
end
