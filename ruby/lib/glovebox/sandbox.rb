# frozen_string_literal: true

module Glovebox
  # One tool call the guest made, as this process saw it (the
  # transcript). +outcome+ is one of "ok", "error", "vetoed", "denied",
  # "unknown_tool", "budget_exceeded" (tool_calls or tool_time spent),
  # "timeout" (the eval's time ran out before the call could start: its
  # hooks or approval took too long, and the method did not run),
  # "oversized" (its answer was over MAX_ANSWER_BYTES: the method ran,
  # the guest got Glovebox::ToolPayloadError) (glovebox.ToolCall's
  # outcomes); +error+ is the message the guest saw
  # ("" on success);
  # +approval+ is "approved"/"denied" for a gated tool, else nil;
  # +duration+ is seconds (Float) spent in the tool method; +elided+ is
  # true when +args+, +kwargs+ and +result+ were dropped ([], {} and nil)
  # because the eval's transcript already held MAX_TRANSCRIPT_DATA bytes
  # of them (the tool itself got its arguments whole).
  ToolCall = Struct.new(:name, :args, :kwargs, :result, :error, :outcome, :approval, :duration, :elided,
                        keyword_init: true) do
    def ok? = outcome == "ok"
  end

  # How many bytes of tool arguments and results, as they crossed from
  # the guest (JSON text) and back (reply frames), one eval's transcript
  # (Result#tool_calls) keeps: 1 MiB, glovebox.MaxTranscriptData. Later
  # entries keep the name, outcome, error and duration and are marked
  # elided, so a guest calling tools with large arguments cannot make
  # this process hold more than that per eval (1,000 calls of 1 MiB
  # otherwise stay reachable from the Result).
  MAX_TRANSCRIPT_DATA = 1 << 20

  # The most bytes a tool's answer may take on its way to the embedded
  # child (the protocol's largest frame, 64 MiB, less room for the
  # frame's head). A larger answer is not sent: the guest gets
  # Glovebox::ToolPayloadError, the transcript "oversized". (The child
  # then refuses anything over Limits.ToolPayload, 1 MiB by default, the
  # same way.)
  MAX_ANSWER_BYTES = (64 << 20) - 4096

  # The guest's exception: +class_name+ ("ZeroDivisionError",
  # "Glovebox::ToolError", ...), +message+, +backtrace+ (Array of String).
  # security_box's spelling reads the same fields by String key:
  # error["class"], error["message"], error["backtrace"].
  GuestError = Struct.new(:class_name, :message, :backtrace, keyword_init: true) do
    def [](key)
      key = :class_name if key.to_s == "class"
      super(key.to_sym)
    end

    # {"class", "message", "backtrace"}, as security_box and code mode
    # write an error.
    def to_h = { "class" => class_name, "message" => message, "backtrace" => backtrace }

    # "ZeroDivisionError: divided by 0", as Enclave shows an error.
    def to_s = "#{class_name}: #{message}"
  end

  # What one eval did. +status+ is a Status (a String that also equals
  # its Symbol: r.status == "ok" and r.status == :ok): "ok", "error" (a
  # guest exception: see +error+), "timeout", "fuel_exhausted",
  # "memory_limit", "canceled", "tool_budget_exceeded", "sandbox_error",
  # "suspended". +value+ is the
  # last expression's value as Ruby data (nil unless ok); +stdout+ and
  # +stderr+ Strings; +tool_calls+ this process's transcript (Array of
  # ToolCall); +fuel_used+ Integer; +duration+ seconds; +session_reset+
  # true when a session's VM was discarded by this eval; +key+ the
  # eval's idempotency key (the key to #continue a suspended one);
  # +pending+ the paused call (a Pending) when status is "suspended",
  # else nil; +rpcs+ the calls of rpcs: handlers (security_box's
  # transcript: frozen Hashes {"name", "args", "ok", "result" or
  # "error"}; [] without rpcs).
  Result = Struct.new(:status, :value, :stdout, :stderr, :stdout_truncated, :stderr_truncated,
                      :error, :tool_calls, :fuel_used, :duration, :session_reset, :key, :raw, :pending, :rpcs,
                      keyword_init: true) do
    def ok? = status == "ok"
    def suspended? = status == "suspended"

    # The wall-clock time of the eval in milliseconds (Float), as
    # security_box reports it.
    def duration_ms = duration.to_f * 1000
  end

  # The tool call a suspended eval paused in (Sandbox.new(suspend: ...)):
  # +id+ the call's id (String, the executor's), +name+ the tool (String), +args+
  # and +kwargs+ its positional (Array) and keyword (Hash, String keys)
  # arguments as Ruby data, +reason+ the executor's String saying why it
  # paused.
  Pending = Struct.new(:id, :name, :args, :kwargs, :reason, keyword_init: true)

  # Runs Ruby code in glovebox's wasm sandbox (CRuby 4.0), the way
  # Enclave runs it in mruby: the code can call only the methods you
  # expose, and those run here, in this process, when the guest calls
  # them. The guest runs in the glovebox child this process starts
  # (embedded, the default: Glovebox::Child), or on a glovebox executor
  # (executor:), with the same API.
  #
  #   sandbox = Glovebox::Sandbox.new(tools: SupportTools.new(user))
  #   r = sandbox.eval("orders.sum { _1['total'] }")
  #   r.status  #=> "ok";  r.value  #=> 129.5
  #
  # A Sandbox is used by one thread at a time (so is its Client); the
  # embedded child serves many threads' sandboxes at once.
  class Sandbox
    # Seconds, bytes and counts; nil takes the executor's default
    # (timeout 10 s, memory 512 MiB, stdout 1 MiB, stderr 64 KiB, 1000
    # tool calls, tool time = timeout). fuel: nil or 0 is unmetered.
    LIMIT_KEYS = %i[timeout fuel memory output stderr tool_calls tool_time].freeze

    attr_reader :client, :limits, :before_tool_call, :after_tool_call, :error_sanitizer, :env, :mounts

    # config: a Profile (Glovebox::Configuration.build, or a registered
    # profile: security_box's Sandbox.new(config)) whose settings are the
    # defaults of every keyword below; nil: none.
    # tools: an object whose own public methods become guest functions,
    # or a Hash of name => lambda (or nil; see #expose). only:/except:
    # narrow it (Arrays of Symbols).
    # Without executor: (or client:, or Glovebox.executor) the sandbox
    # runs embedded, on the glovebox child this process starts at its
    # first eval; executor:, token:, ca_file: make a Client to run it on
    # that executor instead (the same API either way). mounts: host
    # directories the guest sees (embedded only), each {host:, guest:,
    # writable: false, description: nil}: read-only unless writable.
    # Limits (those not given take Glovebox.config's): timeout: (seconds,
    # Float), fuel: (Integer), memory: (bytes, at least
    # Exposure::MEMORY_FLOOR), output: (bytes of stdout), tool_calls:
    # (count per eval), tool_time: (seconds inside tools per eval).
    # before_tool_call: ->(name, args, kwargs), or Enclave's ->(name,
    # args) — raising vetoes the call (the guest gets Glovebox::ToolError
    # with your message).
    # after_tool_call: ->(name, args, kwargs, result), or Enclave's
    # ->(name, args, result) — observes.
    # error_sanitizer: ->(name, exception) { String } — the message the
    # guest sees for a tool's own exception (nil or a raise: "tool call
    # failed"); vetoes pass through unsanitized.
    # approver: ->(name, args, kwargs) { true/false } (or ->(name, args))
    # — asked before each call of a tool named in require_approval (or
    # needs_approval:).
    # suspend: tool names (Array of Symbol) whose calls pause the eval
    # instead of running (see #continue); needs a state key
    # (Glovebox.state_key embedded, --state-key on an executor).
    # http: a Glovebox::HttpTool whose functions the guest gets (as
    # #expose(http)); mcp: MCP servers whose tools the guest gets (a
    # Glovebox::MCPServers, or the Array of server Hashes it takes),
    # each tool under its own name, or "<server>_<name>" when your tools
    # took that name. Both run in the embedded child (host_tools.rb);
    # through an executor they are the operator's, and an executor's eval
    # profile gives them.
    # profile: the name of an eval profile (String or Symbol): through an
    # executor, one its operator declared (its mounts, HTTP tool, MCP
    # servers and limits, run on the executor; EXECUTOR.md "Eval
    # profiles"), checked with the executor when the Sandbox is made (once
    # per process and profile); embedded, one of Glovebox.eval_profiles
    # (the app's own: {mounts:, http:, mcp:}), so the same code names the
    # same profile in development and in production.
    # Raises ConfigError, naming the option, for an unknown option, a
    # limit that is not a positive number (or a memory below the floor),
    # a hook of another shape, a tools object or name #expose refuses, a
    # needs_approval:/suspend: name that is not an exposed function, a
    # bad mount, http: that is not an HttpTool, an MCP server that cannot
    # be started or whose tool names collide even prefixed, http:/mcp:
    # through an executor, or a profile: that the executor does not grant
    # (its code unknown_profile in the message) or the app did not define.
    # env: the guest's whole ENV ({"NAME" => "value"}; default empty:
    # nothing of this process's environment reaches it), embedded or
    # through an executor; a name that is empty or holds "=" or NUL, or
    # a value holding NUL, raises ConfigError.
    # rpcs: {"name" => ->(args) { ... }}: security_box's host RPC
    # handlers, called from the guest as SB.call("name", key: value)
    # (Glovebox::GuestCode): args is a Hash with String keys, the answer
    # is JSON-round-tripped (anything else becomes its inspect), and a
    # raise is SB::ToolError in the guest.
    # config: a Glovebox::Profile (security_box's named configurations:
    # Glovebox.register / Glovebox.spawn), whose limits, mounts, env and
    # rpcs the keywords given here override; #profile returns it. (The
    # profile: keyword is another thing: an executor's named eval
    # profile, or one of Glovebox.eval_profiles embedded.)
    def initialize(config = nil, tools: nil, only: nil, except: nil, executor: nil, token: nil, ca_file: nil, client: nil,
                   before_tool_call: nil, after_tool_call: nil, error_sanitizer: nil,
                   approver: nil, needs_approval: [], suspend: [], mounts: nil, env: nil, rpcs: nil,
                   http: nil, mcp: nil, profile: nil, **limits)
      if config
        raise ConfigError, "Sandbox.new(config): #{config.class} is not a Glovebox::Profile" unless config.is_a?(Profile)

        limits = config.limits.merge(limits)
        mounts = config.mounts if mounts.nil?
        env = config.env if env.nil?
        rpcs = config.rpcs if rpcs.nil?
        @profile = config
      end
      @limits = check_limits(Glovebox.config.limits.merge(limits))
      @functions = {} # Symbol name => bound callable (Exposure.functions)
      @sources = {} # Symbol name => what exposed it, for errors
      @host_docs = {} # Symbol name => the child's doc of a host function (code mode)
      @servers = [] # the bound MCP servers' notes (code mode)
      @client = Sandbox.client_for(executor, token, ca_file, client) # nil: embedded (embedded.rb)
      self.before_tool_call = before_tool_call
      self.after_tool_call = after_tool_call
      self.error_sanitizer = error_sanitizer
      @approver = Exposure.hook(:approver, approver)
      expose(tools, only: only, except: except) unless NilClass === tools
      mounts, http, mcp = eval_profile(profile, mounts, http, mcp) if profile
      if http
        raise ConfigError, "http: give a Glovebox::HttpTool, not #{http.class}" unless http.is_a?(HttpTool)

        expose(http)
      end
      expose_mcp(mcp) if mcp
      @gated = Exposure.exposed_names("needs_approval", needs_approval, exposed_functions)
      @suspend = Exposure.exposed_names("suspend", suspend, exposed_functions)
      @mounts = Sandbox.mounts_for(mounts || [], @client)
      @env = Sandbox.env_for(env, @client)
      return unless rpcs

      bind_rpcs(rpcs)
      guest_code!(sb: true)
    end

    # The Profile this Sandbox was made from (Sandbox.new(config),
    # Glovebox.spawn), or nil.
    attr_reader :profile

    # Sets the hook run before each tool call: ->(name, args, kwargs) or
    # Enclave's ->(name, args); nil removes it. Raises ConfigError for
    # another shape.
    def before_tool_call=(fn)
      @before_hook = Exposure.hook(:before_tool_call, fn)
      @before_tool_call = fn
    end

    # Sets the hook run after each tool call that returned: ->(name,
    # args, kwargs, result) or Enclave's ->(name, args, result); nil
    # removes it. Raises ConfigError for another shape.
    def after_tool_call=(fn)
      @after_hook = Exposure.hook(:after_tool_call, fn)
      @after_tool_call = fn
    end

    # Sets the error sanitizer: ->(name, exception) { String }; nil
    # removes it. Raises ConfigError for another shape.
    def error_sanitizer=(fn)
      Exposure.hook(:error_sanitizer, fn)
      @error_sanitizer = fn
    end

    # Makes obj's functions guest functions (Exposure.functions says
    # which: only methods obj's own code defines, bound now; a Module's
    # functions, a Class's class methods, a Hash's lambdas by key),
    # narrowed by only: (an allowlist) or except:. An object that defines
    # glovebox_tool_methods (or Enclave's enclave_tool_methods), public
    # or private, declares a hard ceiling: methods outside it are never
    # exposed, whatever only: says. Raises ConfigError for a name in
    # only:/except: that is not an exposable function (so a typo cannot
    # silently widen or misname the surface), for a name glovebox
    # reserves (puts, send, to_s, dig, ...: the executor would refuse
    # it), for a name exposed twice, and for an object exposing nothing.
    # Returns self.
    def expose(obj, only: nil, except: nil)
      host_only!(obj.is_a?(HttpTool) ? "http" : "mcp") if obj.is_a?(HostTools)
      fns = Exposure.functions(obj, only: only, except: except)
      twice = fns.keys & @functions.keys
      raise ConfigError, "#{twice.join(", ")}: exposed already (by #{@sources[twice.first]})" unless twice.empty?

      src = Exposure.describe(obj)
      fns.each do |n, fn|
        @functions[n] = fn
        @sources[n] = src
        @host_docs[n] = obj.docs[n.to_s] if obj.is_a?(HostTools) && obj.docs
      end
      self
    end

    # Binds the tools of MCP servers (a Glovebox::MCPServers, or the
    # Array of server Hashes it takes) as guest functions: each under its
    # own name, or "<server>_<name>" when that is exposed already.
    # Raises ConfigError when a prefixed name is taken too, or through an
    # executor. Returns self.
    def expose_mcp(servers)
      host_only!("mcp")
      servers = MCPServers.new(servers) unless servers.is_a?(MCPServers)
      servers.bind!
      planned = {}
      servers.names.each do |g|
        server = servers.origin(g).to_s.split("/").first
        name = g.to_sym
        if @functions.key?(name) || planned.key?(name)
          alt = :"#{server}_#{g}"
          if @functions.key?(alt) || planned.key?(alt)
            raise ConfigError, "mcp: #{servers.origin(g)}: both #{g} and #{alt} are exposed already " \
                               "(by #{@sources[name] || @sources[alt] || "another server"}); rename your tool or leave it out"
          end
          name = alt
        end
        planned[name] = g
      end
      planned.each do |name, g|
        @functions[name] = HostFunction.new(servers, g)
        @sources[name] = "MCP server #{servers.origin(g).to_s.split("/").first}"
        doc = servers.docs[g]
        if doc && name.to_s != g && doc["example"].to_s.start_with?("#{g}(") # bound under its prefixed name
          doc = doc.merge("example" => "#{name}#{doc["example"].delete_prefix(g)}")
        end
        @host_docs[name] = doc
      end
      rename = planned.to_h { |name, g| [g, name.to_s] }
      @servers += servers.servers.map { |n| n.merge("tools" => n["tools"].map { rename.fetch(_1, _1) }.sort) }
      self
    end

    # The guest function names, sorted (Array of Symbol).
    def exposed_functions = @functions.keys.sort

    # A line for consoles and logs: where it runs, its functions (the
    # first 8) and the limits set, e.g. "#<Glovebox::Sandbox embedded
    # functions: order, orders timeout=5>"; never a bound method, a
    # tool object, a token or a key.
    def inspect
      names = exposed_functions
      fns = names.empty? ? "none" : names.first(8).join(", ")
      fns += ", ... (#{names.size})" if names.size > 8
      where = embedded? ? "embedded" : "executor #{Client.safe_url(@client.url)}"
      where += " profile #{@remote_profile}" if @remote_profile
      lim = @limits.map { |k, v| " #{k}=#{v}" }.join
      "#<#{self.class} #{where} functions: #{fns}#{lim}>"
    end

    # A Sandbox like this one (tools, hooks, approvals) with settings
    # changed, in either spelling (Profile: timeout:/timeout_ms:,
    # memory:/memory_size:, output:/stdout_limit:, stderr:/stderr_limit:,
    # fuel:/fuel_ms:, tool_calls:, tool_time:, mounts:, env:, rpcs:
    # (replacing the rpcs)); this one unchanged. Raises ConfigError as
    # Sandbox.new does.
    def with(**settings)
      s = Profile.normalize(settings, "eval")
      s[:fuel] = Profile.new(s).effective_fuel if s.key?(:fuel_ms)
      copy = dup
      copy.send(:derive!, s)
      copy
    end

    # Marks tools whose every call asks the approver first; with a block,
    # the block is the approver: ->(name, args, kwargs) { true/false }. A
    # denied call raises Glovebox::ToolDenied in the guest (rescuable).
    # Each name must be an exposed function (expose the tools first):
    # otherwise raises ConfigError naming it, so a typo cannot leave the
    # real tool ungated.
    def require_approval(*names, &block)
      gated = Exposure.exposed_names("require_approval", names, exposed_functions)
      @approver = Exposure.hook(:approver, block) if block
      @gated |= gated
      self
    end

    # Runs code in a fresh VM and returns a Result (a guest exception or a
    # limit is a Result, never a raise). stdin: String; args: Array of
    # String (ARGV); key: an idempotency key to retry an in-doubt eval
    # (default: a fresh one). Raises APIError when the executor refuses
    # (evals_disabled, unauthenticated, request_too_large, ...),
    # ConnectionError when it cannot be reached, InDoubtError when the
    # connection broke mid-eval (retry with #retry). A block receives the
    # guest's output as it writes it: (stream, bytes), stream :stdout or
    # :stderr, bytes a binary String (Result#stdout still has it all).
    # suspend: tool names (Array of Symbol) pausing this eval (default:
    # the Sandbox's suspend:): a call of one ends the eval with status
    # "suspended" and Result#pending; continue it with #continue. With
    # suspend names, an executor without --state-key raises APIError
    # "bad_request". Raises TypeError for code that is not a String (nil
    # included) and ConfigError for a suspend: name that is not an
    # exposed function; nothing is sent then.
    #
    # Any other keyword is a per-call setting (security_box's spelling:
    # timeout_ms:, fuel:, memory_size:, stdout_limit:, mounts:, env:,
    # rpcs:, ...; or glovebox's: timeout:, memory:, output:, ...): this
    # eval runs in a Sandbox derived with them (#with), this one
    # unchanged.
    def eval(code, stdin: nil, args: nil, key: nil, suspend: nil, **per_call, &on_output)
      return with(**per_call).eval(code, stdin: stdin, args: args, key: key, suspend: suspend, &on_output) unless per_call.empty?

      req = { "code" => source(code), "tools" => tool_names, "limits" => wire_limits }
      names = suspend_for(suspend)
      req["suspend_tools"] = names unless names.empty?
      run_eval(req, stdin, args, key, &on_output)
    end

    # Continues the suspended eval under from (a Result#key; only the key
    # is needed, so another process or Sandbox may continue it) with
    # exactly one answer for its paused call: approve: true runs the tool
    # here (as #eval runs tools, hooks included), deny: "reason" raises
    # Glovebox::ToolDenied with that message in the guest (rescuable),
    # reply: value answers for the tool with value. Returns the next
    # Result (its own key; it may be "suspended" again: continue that
    # key). Its stdout/stderr are whole: what the guest wrote before the
    # pause, then after (the block gets only what comes after). key: the continuation's
    # idempotency key (default: a fresh one; reuse it to retry an
    # InDoubtError). A paused eval is continued once: a second
    # continuation raises AlreadyContinued; nothing paused under from
    # (never paused, expired after the retention, another tenant's key)
    # raises RunError "not_found"; an executor without
    # --state-key raises APIError "bad_request". Raises ArgumentError
    # unless exactly one of approve:, deny:, reply: is given.
    def continue(from, approve: nil, deny: nil, reply: NO_REPLY, key: nil, &on_output)
      given = [approve ? 1 : nil, deny, reply.equal?(NO_REPLY) ? nil : 1].compact
      raise ArgumentError, "continue needs exactly one of approve: true, deny: REASON, reply: VALUE" unless given.size == 1

      c = { "from" => from }
      if approve then c["approve"] = true
      elsif deny then c["deny"] = deny.to_s
      else c["reply"] = reply_frame(reply)
      end
      run_eval({ "continue" => c, "limits" => wire_limits }, nil, nil, key, &on_output)
    end

    # @private reply:'s default (nil is a value to reply with).
    NO_REPLY = Object.new.freeze

    # Sends the eval an InDoubtError came from again, under its key: the
    # executor attaches to it (tool calls already answered are not made
    # again: their answers are remembered here) or answers its record.
    def retry(code, error, stdin: nil, args: nil, &on_output)
      eval(code, stdin: stdin, args: args, key: error.key, &on_output)
    end

    # Cancels the eval running under key (DELETE /v1/evals/{key}), from
    # another thread than the one waiting in #eval (pass that eval a key:
    # of your own): it ends with status "canceled". Uses a connection of
    # its own. Raises APIError "not_found" for a key never used.
    def cancel(key)
      if embedded?
        (Child.running || raise(APIError.new("not_found", "nothing runs under key #{key}", from: "glovebox")))
          .control({ "op" => "cancel", "key" => key })
      else
        @client.request(:delete, "/v1/evals/#{key}", conn: :cancel)
      end
      nil
    end

    # Opens a session: a VM kept on the executor between evals, so
    # variables, methods and required libraries carry over. With a block,
    # yields it and closes it afterwards. What survives depends on the
    # executor (see Session).
    def session
      s = Session.new(self)
      return s unless block_given?

      begin
        yield s
      ensure
        s.close
      end
    end

    # @private The request's limits in the wire's shape.
    def wire_limits
      l = {}
      l["timeout_ms"] = (@limits[:timeout] * 1000).round if @limits[:timeout]
      l["fuel"] = @limits[:fuel] if @limits[:fuel]
      l["memory"] = @limits[:memory] if @limits[:memory]
      l["stdout"] = @limits[:output] if @limits[:output]
      l["stderr"] = @limits[:stderr] if @limits[:stderr]
      l
    end

    # @private
    def tool_names = exposed_functions.map(&:to_s)

    # @private The parameters of the exposed function name, read from
    # its signature (Exposure.params), for code mode's description.
    def tool_params(name) = Exposure.params(@functions.fetch(name.to_sym))

    # @private The executor's eval profile this sandbox names (nil:
    # none, or embedded).
    attr_reader :remote_profile

    # @private Checks profile with client's executor (once per process,
    # executor, token and name): ConfigError for unknown_profile.
    def self.check_remote_profile(client, name)
      key = client.identity + [name]
      @checked_profiles ||= {}
      return if @checked_profiles[key]

      begin
        client.request(:post, "/v1/codemode", { "limits" => {}, "profile" => name })
      rescue APIError => e
        raise unless e.code == "unknown_profile"

        raise ConfigError, "profile: #{name.inspect}: #{e.message}"
      end
      @checked_profiles.shift while @checked_profiles.size >= 256
      @checked_profiles[key] = true
    end

    # @private The child's doc of a host function (HttpTool, MCP) for
    # code mode ({"description", "params", "returns", "example"}), or nil.
    def host_doc(name) = @host_docs[name.to_sym]

    # @private The bound MCP servers' notes for code mode: [{"name",
    # "tools", "instructions"}].
    def mcp_servers = @servers

    # @private The tool names (Strings) pausing one eval: names (checked
    # against the exposed functions) or else the Sandbox's suspend:.
    def suspend_for(names)
      (names.nil? ? @suspend : Exposure.exposed_names("suspend", names, exposed_functions)).map(&:to_s)
    end

    # @private code as the String an eval sends (wrapped by GuestCode
    # when the sandbox serves SB.call or Enclave's `_`); raises TypeError
    # for anything else (nil is not an empty program).
    def source(code)
      code = code.to_str if !code.is_a?(String) && code.respond_to?(:to_str)
      raise TypeError, "eval needs the program's source as a String, got #{code.nil? ? "nil" : code.class}" unless code.is_a?(String)
      return code unless @guest_code

      GuestCode.wrap(code, **@guest_code)
    end

    # @private Has every eval's code wrapped (GuestCode.wrap): sb: true
    # defines SB (with the rpcs' names), capture: true keeps the value in
    # `_` and answers its inspect. bare_output: true leaves glovebox's
    # truncation marker out of Result#stdout and #stderr (security_box's
    # and Enclave's output is at most its limit; the *_truncated flags
    # still say so).
    def guest_code!(sb: false, capture: false, bare_output: false)
      @guest_code = { sb: sb ? (@sb_names || {}) : nil, capture: capture }
      @bare_output = bare_output
      self
    end

    # @private SB.call's names (String => guest function name) of the
    # rpcs and bound tools, or nil.
    attr_reader :sb_names

    # @private Binds fns ({name String => callable taking keywords}) as
    # SB.call targets, each under a guest function name of its own;
    # setting says which option gave them, for errors.
    def bind_sb(fns, setting)
      @sb_names ||= {}
      fns.each do |name, fn|
        name = name.to_s
        raise ConfigError, "#{setting}: #{name.inspect} is bound twice" if @sb_names.key?(name)
        raise ConfigError, "#{setting}: a name is a non-empty String, not #{name.inspect}" if name.empty?

        fname = GuestCode.function_name(name, @functions)
        @functions[fname] = fn
        @sources[fname] = setting
        @sb_names[name] = fname.to_s
      end
      @guest_code[:sb] = @sb_names if @guest_code&.dig(:sb)
      self
    end

    # @private Posts an eval request and serves its tool calls.
    def run_eval(req, stdin, args, key, &on_output)
      return embedded_run(req, stdin, args, key, &on_output) if embedded?

      key ||= Client::Keys.fresh("e-")
      req = req.merge("idempotency_key" => key)
      req["profile"] = @remote_profile if @remote_profile && !req["session"] && !req["continue"]
      req["stdin"] = [stdin.b].pack("m0") if stdin
      req["args"] = args if args
      req["env"] = @env unless @env.to_h.empty? || req["continue"]
      state = (@inflight ||= {}).delete(key) || CallState.new
      holder = 0
      record = nil
      begin
        @client.stream("/v1/evals", req, key) do |ev|
          case ev["type"]
          when "holder" then holder = ev.dig("extra", "holder")
          when "stdout", "stderr" then on_output&.call(ev["type"].to_sym, ev["data"].to_s.unpack1("m0"))
          when "tool_call"
            call = ev["extra"]
            next if call["holder"] != holder

            reply = state.answers[call["id"]] ||= answer(call, state)
            post_answer(key, call["id"], reply)
          when "result" then record = ev["record"]
          end
        end
      rescue InDoubtError
        @inflight[key] = state
        @inflight.shift while @inflight.size > 64
        raise
      end
      c = req["continue"]
      to_result(record, state, key, answered_in_record: c && !c["approve"])
    end

    # @private Sends one tool answer. The eval is under way, so a broken
    # connection leaves it in doubt; not_found means the call needs no
    # answer any more (the eval ended: its stream says how).
    def post_answer(key, id, reply)
      @client.request(:post, "/v1/evals/#{key}/tool-results", { "id" => id, "reply" => reply }, conn: :call)
    rescue ConnectionError => e
      raise InDoubtError.new(key, e.message)
    rescue APIError => e
      raise unless e.code == "not_found"
    end

    CallState = Struct.new(:answers, :calls, :tool_time, :aborted, :kept) do
      def initialize = super({}, [], 0.0, nil, 0)
    end

    private

    # Changes a copy's settings (with): settings are Profile.normalize's.
    def derive!(s)
      @functions = @functions.dup
      @sources = @sources.dup
      @sb_names = @sb_names&.dup
      @guest_code = @guest_code&.dup
      @guest_code[:sb] = @sb_names || {} if @guest_code && @guest_code[:sb]
      @inflight = nil
      @config_shape = @config_json = nil
      @limits = check_limits(@limits.merge(s.slice(*LIMIT_KEYS)).compact)
      @mounts = Sandbox.mounts_for(s[:mounts] || [], @client) if s.key?(:mounts)
      @env = Sandbox.env_for(s[:env], @client) if s.key?(:env)
      return unless s.key?(:rpcs)

      (@rpc_names || []).each do |name|
        @functions.delete(@sb_names.delete(name).to_sym)
      end
      @rpc_names = []
      bind_rpcs(s[:rpcs]) if s[:rpcs]
      @guest_code ? @guest_code[:sb] = @sb_names : guest_code!(sb: true)
    end

    # Binds security_box's rpcs ({"name" => ->(args) { ... }}) as SB.call
    # targets: each handler gets the call's keywords as a Hash with
    # String keys and its answer goes back JSON-round-tripped; a raise is
    # SB::ToolError (class and message) in the guest.
    def bind_rpcs(rpcs)
      rpcs = Profile.check_rpcs(rpcs, "rpcs:")
      @rpc_names = (@rpc_names || []) + rpcs.keys
      bind_sb(rpcs.transform_values do |fn|
        lambda do |**kw|
          GuestCode.json_safe(fn.call(GuestCode.json_safe(kw)))
        rescue StandardError => e
          raise GuestCode::Raised.new(e.message, GuestCode.class_leaf(e))
        end
      end, "rpcs:")
    end

    # The reply frame for one tool call (EXECUTOR.md, tool-results). A
    # call whose eval has ended by the time its hooks and approval are
    # done (its time_left_ms, counted from now, has passed) is not run:
    # the transcript says "timeout".
    def answer(call, st)
      return st.aborted if st.aborted

      # When the eval ends: the embedded child's "deadline" (a monotonic
      # clock reading, embedded.rb), or an executor's time_left_ms.
      due = call["deadline"] || (call["time_left_ms"] && (clock + call["time_left_ms"].to_f / 1000))
      name = call["name"]
      pos, kw = Value.load(call["args"])
      pos ||= []
      kw ||= {}
      tc = ToolCall.new(name: name, args: pos, kwargs: kw, result: nil, error: "", outcome: "ok", duration: 0.0,
                        elided: false)
      st.calls << tc
      keep(st, tc, call["args"].to_s.bytesize)
      return too_late(st, tc) if due && clock >= due # the eval ended before the call reached us
      fn = @functions[name.to_sym]
      return refuse(tc, "unknown_tool", "UnknownToolError", "no tool named #{name.inspect}") unless fn

      max = @limits[:tool_calls] || 1000
      return abort_eval(st, tc, "the eval made more than #{max} tool calls (tool_calls: #{max})") if st.calls.size > max

      tmax = @limits[:tool_time] || @limits[:timeout]
      return abort_eval(st, tc, "the eval spent its #{tmax} s tool-time budget (tool_time)") if tmax && st.tool_time >= tmax

      begin
        @before_hook&.call(name.to_sym, pos, kw)
      rescue StandardError => e
        return refuse(tc, "vetoed", "ToolError", e.message)
      end
      if @gated.include?(name.to_sym)
        ok = begin
          @approver ? @approver.call(name.to_sym, pos, kw) : false
        rescue StandardError
          false
        end
        tc.approval = ok ? "approved" : "denied"
        return refuse(tc, "denied", "ToolDenied", "#{name} needs approval and was denied") unless ok
      end
      return too_late(st, tc) if due && clock >= due # a person's approval came after the eval's end
      t0 = clock
      begin
        if fn.is_a?(HostFunction)
          value = fn.call_until(due, pos, kw) # in the child, by its deadline
        else
          kwsym = kw.transform_keys(&:to_sym)
          value = kwsym.empty? ? fn.call(*pos) : fn.call(*pos, **kwsym)
        end
        frame = reply_frame(value)
        if frame.bytesize > MAX_ANSWER_BYTES
          return refuse(tc, "oversized", "ToolPayloadError",
                        "#{name} returned #{frame.bytesize} bytes, more than a tool's answer may carry")
        end
        tc.result = value unless keep(st, tc, frame.bytesize)
      rescue HostToolAbort => e # its time ran out in the child: the eval's has
        tc.outcome = e.status == "timeout" ? "timeout" : "budget_exceeded"
        tc.error = e.message
        return st.aborted = "abort\n#{e.status}\n#{e.message}"
      rescue ValueError => e
        return refuse(tc, "error", "TypeError", "#{name} returned a value that cannot cross to the sandbox: #{e.message}")
      rescue *TOOL_FAILURES => e
        klass = case e
                when ToolError then e.guest_class
                when ArgumentError then "ArgumentError"
                else "ToolError"
                end
        return refuse(tc, "error", klass, sanitize(name, e))
      ensure
        tc.duration = clock - t0
        st.tool_time += tc.duration
      end
      if tmax && st.tool_time > tmax
        tc.result = nil
        return abort_eval(st, tc, "the eval spent #{st.tool_time.round(3)} s in tools, over its #{tmax} s tool-time budget (tool_time)")
      end
      begin
        @after_hook&.call(name.to_sym, pos, kw, value)
      rescue StandardError
        nil # an observer's failure does not change the call
      end
      frame
    end

    # What a tool may raise and the guest gets as its error, the eval
    # going on (Go's glovebox recovers a tool's panic the same way): any
    # StandardError, and the failures a guest's arguments can provoke in
    # a tool that are not StandardErrors: a recursion too deep
    # (SystemStackError), an allocation refused (NoMemoryError), and
    # ScriptError (NotImplementedError, LoadError). Interrupt, SystemExit
    # and other signals still end this process's work as they would.
    TOOL_FAILURES = [StandardError, ScriptError, SystemStackError, NoMemoryError].freeze

    def clock = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    # Counts bytes of tc's data against MAX_TRANSCRIPT_DATA; past it, tc
    # drops its arguments and result (elided) and this returns true.
    def keep(st, tc, bytes)
      st.kept += bytes
      return false if st.kept <= MAX_TRANSCRIPT_DATA

      tc.args = []
      tc.kwargs = {}
      tc.result = nil
      tc.elided = true
    end

    # Ends the eval for a spent budget (tool_calls or tool_time), as Go's
    # glovebox does: status "tool_budget_exceeded", the call's outcome
    # "budget_exceeded"; every later call gets the same answer.
    def abort_eval(st, tc, msg)
      tc.outcome = "budget_exceeded"
      tc.error = msg
      st.aborted = "abort\ntool_budget_exceeded\n#{msg}"
    end

    # Records tc as not run: its eval's time ran out before it could
    # start (it arrived, or its approval came, too late). The answer ends
    # the eval, as its time has.
    def too_late(st, tc)
      tc.outcome = "timeout"
      tc.error = "the eval's time ran out before #{tc.name} could start, so it did not run"
      st.aborted = "abort\ntimeout\n#{tc.error}"
    end

    # The limits as given, each checked: a positive number (fuel and
    # tool_calls may be 0), memory at least Exposure::MEMORY_FLOOR.
    def check_limits(limits)
      unknown = limits.keys - LIMIT_KEYS
      raise ConfigError, "unknown option(s) #{unknown.join(", ")}; limits are #{LIMIT_KEYS.join(", ")}" unless unknown.empty?

      limits.each do |k, v|
        next if v.nil?

        int = %i[fuel memory output stderr tool_calls].include?(k)
        ok = int ? v.is_a?(Integer) : v.is_a?(Numeric) && v.finite?
        ok &&= %i[fuel tool_calls].include?(k) ? v >= 0 : v.positive?
        raise ConfigError, "#{k}: #{v.inspect} is not a #{int ? "positive Integer" : "positive number"}" unless ok
      end
      if limits[:memory] && limits[:memory] < Exposure::MEMORY_FLOOR
        raise ConfigError, "memory: #{limits[:memory]} bytes is below the #{Exposure::MEMORY_FLOOR}-byte floor " \
                           "(#{format("%.1f", Exposure::MEMORY_FLOOR / 1048576.0)} MiB, what the booted guest occupies)"
      end
      limits.compact
    end

    # The profile: option. Through an executor: checked there (POST
    # /v1/codemode names it; nothing runs), once per process, executor,
    # token and name. Embedded: Glovebox.eval_profiles[name] gives more
    # mounts and the http:/mcp: the Sandbox was not given. Returns the
    # mounts, http and mcp to use.
    def eval_profile(profile, mounts, http, mcp)
      name = profile.to_s
      raise ConfigError, "profile: #{profile.inspect} is not a profile name (a-z 0-9 _ -, starting with a letter)" unless name.match?(/\A[a-z][a-z0-9_-]{0,63}\z/)

      if @client
        Sandbox.check_remote_profile(@client, name)
        @remote_profile = name
        return [mounts, http, mcp]
      end
      spec = Glovebox.config.eval_profiles.transform_keys(&:to_s)[name]
      unless spec
        raise ConfigError, "profile: #{name.inspect}: embedded, the profiles are the app's own (Glovebox.eval_profiles: " \
                           "#{Glovebox.config.eval_profiles.keys.map(&:to_s).sort.join(", ").then { _1.empty? ? "none" : _1 }}); " \
                           "through an executor, its operator's"
      end
      spec = spec.transform_keys(&:to_sym)
      bad = spec.keys - %i[mounts http mcp]
      raise ConfigError, "profile: #{name}: unknown key(s) #{bad.join(", ")}; an embedded profile has mounts:, http:, mcp:" unless bad.empty?
      raise ConfigError, "http: given, and the profile #{name} has one" if http && spec[:http]
      raise ConfigError, "mcp: given, and the profile #{name} has servers" if mcp && spec[:mcp]

      @remote_profile = nil
      [Array(spec[:mounts]) + Array(mounts), http || spec[:http], mcp || spec[:mcp]]
    end

    # Refuses a host tool (http:, mcp:, an HttpTool) through an
    # executor: the network and MCP servers there are the operator's.
    def host_only!(what)
      return unless @client

      raise ConfigError, "#{what}: the HTTP tool and MCP servers run in the embedded child; through an executor they " \
                         "are its operator's: name one of its eval profiles (profile:)"
    end

    def refuse(tc, outcome, klass, msg)
      tc.outcome = outcome
      tc.error = msg.to_s
      "err\n#{klass}\n#{msg}"
    end

    def sanitize(name, e)
      return e.message unless @error_sanitizer

      m = @error_sanitizer.call(name.to_sym, e)
      m.nil? ? "tool call failed" : m.to_s
    rescue StandardError
      "tool call failed"
    end

    def reply_frame(v)
      case v
      when nil then "n"
      when true then "t"
      when false then "f"
      when Integer then "i\n#{v}"
      when String
        w = Value.string_to_wire(v)
        w.is_a?(String) ? "s\n#{w}" : "j\n#{JSON.generate(w)}"
      else "j\n#{Value.dump(v)}"
      end
    end

    # answered_in_record: a continuation an executor answered by deny:
    # or reply:, whose record's transcript holds the paused call just
    # before the calls this process served.
    def to_result(record, st, key, answered_in_record: false)
      raise InDoubtError.new(key, "the stream ended without a record") unless record

      ev = record["eval"]
      raise(record.dig("error", "code") == "already_continued" ? AlreadyContinued : RunError, record) unless ev

      err = ev["error"] && GuestError.new(class_name: ev["error"]["class"], message: ev["error"]["message"],
                                          backtrace: ev["error"]["backtrace"] || [])
      calls = st.calls
      rec = ev["tool_calls"].is_a?(Array) ? ev["tool_calls"] : nil
      # A continuation answered by deny: or reply: (the paused call never
      # came here): its entry first, as the child sends it or as the
      # executor's record has it.
      if answered_in_record && rec
        i = rec.size - calls.size - 1
        calls = [recorded_call(rec[i])] + calls if i >= 0
      elsif calls.empty? && rec # answered from the record: its transcript
        calls = rec.map { recorded_call(_1) }
      end
      calls = [recorded_call(ev["answered"])] + calls if ev["answered"].is_a?(Hash)
      value = ev["value"].to_s.empty? ? nil : Value.load(ev["value"])
      Result.new(status: Status[ev["status"]], value: value, rpcs: rpc_transcript(calls),
                 stdout: output(ev, "stdout"), stderr: output(ev, "stderr"),
                 stdout_truncated: ev["stdout_truncated"] || false, stderr_truncated: ev["stderr_truncated"] || false,
                 error: err, tool_calls: calls, fuel_used: ev["fuel_used"], duration: ev["duration_ms"].to_f / 1000,
                 session_reset: ev["session_reset"] || false, key: key, raw: ev, pending: pending(ev["pending"]))
    end

    # A ToolCall from a transcript entry in glovebox.ToolCall's JSON.
    def recorded_call(c)
      ToolCall.new(name: c["name"], args: Value.from_wire(c["args"]) || [], kwargs: Value.from_wire(c["kwargs"]) || {},
                   result: Value.from_wire(c["result"]), error: c["error"].to_s, outcome: c["outcome"],
                   approval: c["approval"], duration: c["duration_ms"].to_f / 1000, elided: c["elided"] || false)
    end

    # ev's stream (stdout or stderr), without glovebox's truncation
    # marker when bare_output was asked for.
    def output(ev, stream)
      text = ev[stream].to_s
      return text unless @bare_output && ev["#{stream}_truncated"]

      text.sub(/\n\[glovebox: #{stream} truncated at \d+ bytes\]\n\z/, "")
    end

    # The calls of SB.call targets as security_box's Result#rpcs shows
    # them: {"name", "args", "ok", "result" or "error"}, frozen.
    def rpc_transcript(calls)
      return [].freeze unless @sb_names

      by_fn = @sb_names.invert
      calls.filter_map do |c|
        name = by_fn[c.name.to_s] or next
        e = { "name" => name, "args" => GuestCode.json_safe(c.kwargs), "ok" => c.outcome == "ok" }
        c.outcome == "ok" ? e["result"] = GuestCode.json_safe(c.result) : e["error"] = c.error
        e.freeze
      end.freeze
    end

    def pending(p)
      return nil unless p

      args = p["args"].is_a?(String) ? Value.load(p["args"]) : Value.from_wire(p["args"])
      pos, kw = args
      Pending.new(id: p["id"], name: p["name"], args: pos || [], kwargs: kw || {}, reason: p["reason"].to_s)
    end
  end

  # A VM kept between evals (Sandbox#session): state carries from one
  # eval to the next; a limit or crash discards it
  # (Result#session_reset). Embedded, it lives in the child's memory (a
  # forked process or a restarted child does not have it: RunError
  # "not_found"), paused evals included. On an executor without
  # --state-key a
  # session lives in its memory: it ends with its restart (the next eval
  # raises RunError, code "not_found"). With --state-key its state is
  # stored after each eval, so it survives an executor's restart and goes
  # on through any executor sharing the store (a guest that keeps a file
  # open between evals is stored reset: session_reset). Either way it
  # ends after the executor's idle timeout (idle_timeout, seconds). With
  # --state-key a session's eval can pause at a suspend: tool as
  # Sandbox#eval's does: the whole session then waits (its evals raise
  # RunError "session_paused", running nothing) until Sandbox#continue
  # answers the call, through any executor sharing the store; the
  # session goes on from there. One user per session.
  class Session
    attr_reader :id, :idle_timeout

    # Raises APIError ("queue_full" when the tenant has its most sessions
    # open, "evals_disabled").
    def initialize(sandbox)
      @sb = sandbox
      info = if sandbox.embedded?
               sandbox.embedded_session_open
             else
               sandbox.client.request(:post, "/v1/sessions", { "tools" => sandbox.tool_names, "limits" => sandbox.wire_limits,
                                                               "profile" => sandbox.remote_profile }.compact)
             end
      @id = info["id"]
      @idle_timeout = info["idle_timeout_ms"].to_f / 1000
    end

    # Runs code in the session's VM; as Sandbox#eval (suspend: defaults
    # to the Sandbox's too, and needs an executor with --state-key).
    def eval(code, stdin: nil, args: nil, key: nil, suspend: nil, &on_output)
      req = { "code" => @sb.source(code), "session" => @id }
      names = @sb.suspend_for(suspend)
      req["suspend_tools"] = names unless names.empty?
      @sb.run_eval(req, stdin, args, key, &on_output)
    end

    # A line for consoles and logs: the session id's start, where it
    # lives, whether it is closed.
    def inspect = "#<#{self.class} #{@id.to_s[0, 10]}... #{embedded? ? "embedded" : "executor"}#{@closed ? " closed" : ""}>"

    # Ends the session (waits for a running eval of it). Idempotent.
    def close
      return if @closed

      @closed = true
      return @sb.embedded_session_close(@id) if embedded?

      @sb.client.request(:delete, "/v1/sessions/#{@id}")
    rescue APIError => e
      raise unless e.code == "not_found"
    end
  end
end
