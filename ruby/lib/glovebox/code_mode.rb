# frozen_string_literal: true

module Glovebox
  # Code mode: one tool a model calls with a Ruby program. Two ways in.
  #
  # **RubyLLM's shape** (seed 002's RubyLLM::CodeMode, with the class name
  # changed): a subclass declares the folders the program sees and the
  # host tools it may call, and is handed to a chat. When RubyLLM is
  # loaded before this class is first used, CodeMode is a RubyLLM::Tool
  # (chat.with_tools(Analytics) works); without it, the same class works
  # on its own (#name, #description, #params_schema, #execute(code:),
  # #call), and the gem needs nothing but the standard library.
  #
  #   class Analytics < Glovebox::CodeMode
  #     mount    source: "data/input", dest: "/data", description: "CSV files with the raw data"
  #     mount_rw source: "workspace", dest: "/workspace", description: "Write reports here"
  #     tools Notes                       # RubyLLM::Tool classes or instances; "name" => Tool
  #     mcps docs                         # MCP servers: their tools, by their names
  #   end
  #   chat.with_tools(Analytics)          # the model sees "analytics"
  #
  # Each #execute runs the program in a fresh VM (nothing carries over);
  # inside it SB.call("notes", note: "...") calls a bound tool on the host
  # (Glovebox::GuestCode). It returns a JSON String: {"status":"ok",
  # "value":..., "stdout":...}, {"status":"error","error":{"class",
  # "message","backtrace"}}, {"status":"timeout","error":"..."}, ...
  #
  # **glovebox's own** (CodeMode.new(sandbox, ...)): wraps a Sandbox you
  # made, whose exposed methods are the guest's functions; the
  # description and the result JSON are glovebox's code mode's (in the
  # embedded child, or on the executor: POST /v1/codemode, EXECUTOR.md
  # "Code mode"), as a Go program gets them. Any Ruby LLM library can call
  # it through #name, #description, #parameters (a JSON Schema Hash) and
  # #call(code:).
  #
  #   tool = Glovebox::CodeMode.new(sandbox, instructions: "Answer for customer 42.")
  #   tool.call(code: "orders.size") #=> '{"status":"ok","value":3,...}'
  class CodeMode < (defined?(::RubyLLM::Tool) ? ::RubyLLM::Tool : Object)
    # The most tools one class (its own and an instance's additions) may
    # bind, as seed 002 sets it.
    MAX_TOOLS = 64
    # The limits a RubyLLM-shaped code mode runs with unless its class
    # says otherwise (limits): seed 002's 30 s of wall clock; no fuel
    # budget (glovebox's wall-clock deadline preempts everything).
    DEFAULT_LIMITS = Profile.build(timeout: 30)

    # A RubyLLM-shaped tool's JSON Schema for its one parameter.
    PARAMS_SCHEMA = {
      "type" => "object",
      "properties" => { "code" => { "type" => "string", "description" => "A complete, self-contained Ruby program" } },
      "required" => ["code"], "additionalProperties" => false,
    }.freeze

    # A host function bound into the sandbox (SB.call name): +name+,
    # +description+, +params+ (a JSON Schema object Hash), +call+ (the
    # adapter, taking keywords), +source+ (the RubyLLM tool or MCP
    # server), +server+ (an MCP server's name, else nil).
    Binding = Struct.new(:name, :description, :params, :call, :source, :server, keyword_init: true)

    # A declared folder: +source+ (the host path, expanded), +dest+ (the
    # guest path), +description+, +writable+.
    Folder = Struct.new(:source, :dest, :description, :writable, keyword_init: true)

    attr_reader :last_result

    # Declares the code parameter on klass the way the loaded RubyLLM
    # takes it (its parameters are per class: each subclass declares
    # its own), for RubyLLM versions that render a tool from them rather
    # than from params_schema.
    def self.declare_code_param(klass)
      return unless defined?(::RubyLLM::Tool) && klass <= ::RubyLLM::Tool

      desc = PARAMS_SCHEMA.dig("properties", "code", "description")
      init = defined?(::RubyLLM::Parameter) ? ::RubyLLM::Parameter.instance_method(:initialize).parameters.map(&:last) : [:desc]
      opts = init.include?(:description) ? { description: desc } : { desc: desc }
      opts[:type] = "string" if init.include?(:type)
      klass.respond_to?(:parameter) ? klass.parameter(:code, **opts) : klass.param(:code, **opts)
    end
    declare_code_param(self)

    class << self
      # Declares a read-only folder: source (a host directory, relative
      # to the working directory now, or absolute) seen at dest (an
      # absolute guest path) and described to the model. Raises
      # ConfigError naming the mount for a host directory that does not
      # exist, a dest that is relative, not normalized, reserved (/tmp,
      # /usr), twice or nested, and more than 16 mounts.
      def mount(source:, dest:, description: nil) = add_folder(source, dest, description, false)

      # Declares a read-write folder (as mount).
      def mount_rw(source:, dest:, description: nil) = add_folder(source, dest, description, true)

      # The folders declared, a subclass's parent's first (Array of
      # Folder).
      def folders = code_mode_state[:folders].dup

      # Binds RubyLLM tools (classes, made once now, or instances; several,
      # arrays, or "name" => tool pairs) as host functions: SB.call(name,
      # ...) in the sandbox, name derived from the class-name leaf
      # (MyApp::Tools::Weather => "weather") unless given. Without
      # arguments, returns the bound tools. Raises ConfigError, binding
      # nothing, for a name bound already, a CodeMode, an object without
      # execute, an execute that takes positional arguments (a tool is
      # called with keywords), one that takes no keywords while its tool
      # declares parameters, or more than MAX_TOOLS.
      def tools(*list)
        return code_mode_state[:bindings].values.reject(&:server).map(&:source).uniq if list.empty?

        commit(CodeMode.tool_bindings(list, code_mode_state[:bindings], "tools"))
      end

      # Binds every tool of MCP servers (instances, or classes made now
      # with the keywords given: mcps Linear, user: u) under their own
      # names, a name bound already as <server>_<name>. Without
      # arguments, returns the servers. Raises ConfigError, binding
      # nothing, for an object that is not a server (no tools), a server
      # whose tools cannot be listed, or a name that collides even
      # prefixed.
      def mcps(*list, **inputs)
        return code_mode_state[:servers].dup if list.empty?

        servers, bindings = CodeMode.server_bindings(list, inputs, code_mode_state[:bindings], "mcps")
        commit(bindings)
        code_mode_state[:servers].concat(servers)
        self
      end

      # The sandbox's limits (glovebox's names or security_box's:
      # timeout:/timeout_ms:, fuel:/fuel_ms:, memory:/memory_size:,
      # output:/stdout_limit:, tool_calls:, ...; Profile#with). Without
      # arguments, returns them (a Profile). Default DEFAULT_LIMITS.
      def limits(**settings)
        return code_mode_state[:limits] if settings.empty?

        check_ruby_llm!
        code_mode_state[:limits] = code_mode_state[:limits].with(**settings)
      end

      # Text added to the model-facing description under "## Notes".
      def instructions(text = nil)
        return code_mode_state[:instructions] if text.nil?

        code_mode_state[:instructions] = text.to_s
      end

      # Prepares what the first execution would (the embedded child, the
      # compiled image, this class's mount layout), so the first call a
      # model makes does not wait. Returns true.
      def warmup
        new.sandbox_for_execution.eval("nil")
        true
      end

      # @private
      def code_mode_state
        @code_mode_state ||= { folders: [], bindings: {}, servers: [], limits: DEFAULT_LIMITS, instructions: nil }
      end

      # @private
      def inherited(sub)
        super
        parent = code_mode_state
        sub.instance_variable_set(:@code_mode_state, { folders: parent[:folders].dup, bindings: parent[:bindings].dup,
                                                       servers: parent[:servers].dup, limits: parent[:limits],
                                                       instructions: parent[:instructions] })
        CodeMode.declare_code_param(sub)
      end

      private

      def add_folder(source, dest, description, writable)
        check_ruby_llm!
        setting = writable ? "mount_rw" : "mount"
        all = code_mode_state[:folders].map { { host: _1.source, guest: _1.dest, writable: _1.writable } }
        all << { host: File.expand_path(source.to_s), guest: dest.to_s, writable: writable }
        Sandbox.normalize_mounts(all, "#{setting} #{source} =>", check_host: true)
        raise ConfigError, "#{setting}: #{all.size} folders, more than #{Profile::MAX_MOUNTS}" if all.size > Profile::MAX_MOUNTS

        code_mode_state[:folders] << Folder.new(source: all.last[:host], dest: dest.to_s, description: description&.to_s, writable: writable)
        self
      end

      def commit(bindings)
        check_ruby_llm!
        all = code_mode_state[:bindings].merge(bindings)
        raise ConfigError, "tools: #{all.size} tools bound, more than #{MAX_TOOLS}" if all.size > MAX_TOOLS

        code_mode_state[:bindings] = all
        self
      end

      # RubyLLM loaded after this class was defined cannot make it a
      # RubyLLM::Tool: say so where the class is declared.
      def check_ruby_llm!
        return unless defined?(::RubyLLM::Tool) && !(self <= ::RubyLLM::Tool)

        raise ConfigError, "#{name || "CodeMode"}: RubyLLM was loaded after Glovebox::CodeMode was first used, so it is not a " \
                           "RubyLLM::Tool; require \"ruby_llm\" before glovebox's code mode is first referenced"
      end
    end

    # With a sandbox: glovebox's own code mode over it (a Sandbox, or a
    # Session to keep state between calls); name: the tool's name
    # (default "run_ruby"); instructions: added to the description;
    # max_output: bytes of JSON per call (default 32 KiB); docs:
    # {tool_name => {description:, params: [{name:, description:,
    # schema:, required:}], returns:, example:}} describing the exposed
    # functions for the model; a function without params: is described
    # by its Ruby signature (required and optional positional
    # parameters, a rest parameter, keyword parameters as keywords), so
    # the example call for def notes(note:) is notes(note: ...); the HTTP
    # tool's and MCP servers' functions are described as the child
    # documents them (an MCP tool's inputSchema, its server's notes).
    # Raises APIError (bad_request for a bad name or doc;
    # evals_disabled).
    #
    # Without one (RubyLLM's Analytics.new): the class's declarations;
    # name: overrides the name derived from the class.
    def initialize(sandbox = nil, name: nil, instructions: nil, max_output: nil, docs: {})
      super()
      return init_glovebox(sandbox, name, instructions, max_output, docs) if sandbox

      @name = (name || CodeMode.derived_name(self.class)).to_s
      @added = {}
      @servers = []
      @instructions = instructions
    end

    # The tool's name: glovebox's code mode's, or (RubyLLM's shape) the
    # class name's leaf in snake case (Analytics => "analytics").
    def name = @name

    # What the model reads about the tool (Markdown).
    def description
      @description || describe
    end

    # The JSON Schema of the tool's input ({"code": String}).
    def params_schema = @sandbox_given ? @parameters : PARAMS_SCHEMA

    # glovebox's code mode: the input's JSON Schema. RubyLLM's shape,
    # when RubyLLM is loaded: RubyLLM's declared parameters (params_schema
    # is the JSON Schema either way).
    def parameters
      return @parameters if @sandbox_given
      return super if defined?(::RubyLLM::Tool) && is_a?(::RubyLLM::Tool)

      PARAMS_SCHEMA
    end

    # Runs the model's program and returns the JSON String the model
    # reads. #last_result keeps glovebox's Result. Takes the program as
    # LLM libraries pass their arguments: execute(code: "..."), a Hash
    # with "code" or :code (execute({"code" => "..."})), or a String
    # key given as a keyword (execute("code" => "...")). Without a
    # String program it runs nothing and answers status "invalid_input".
    def execute(args = nil, code: nil, **rest)
      code = CodeMode.code_argument(args, code, rest)
      return JSON.generate(INVALID_INPUT) unless code.is_a?(String)
      return call_glovebox(code) if @sandbox_given

      @last_result = sandbox_for_execution.eval(code)
      JSON.generate(CodeMode.output_for(@last_result))
    end

    # The call an LLM library makes (call(code: "..."), RubyLLM's
    # call({"code" => "..."}), call("code" => "...")): as #execute.
    def call(args = nil, code: nil, **rest) = execute(args, code: code, **rest)

    # What #execute answers for input without a String program.
    INVALID_INPUT = { "status" => "invalid_input", "error" => "the tool's input is {\"code\": \"<Ruby program>\"}" }.freeze

    # @private The program among an LLM library's arguments: code:, else
    # args' "code" or :code (args a Hash), else the keyword "code" given
    # with a String key; nil when none is there.
    def self.code_argument(args, code, rest)
      return code unless code.nil?

      h = args.respond_to?(:to_hash) ? args.to_hash : rest
      h["code"] || h[:code] || rest["code"]
    end

    # A line for consoles and logs: the class and the tool's name (not
    # the description, a page of Markdown, nor the sandbox's internals).
    def inspect = "#<#{self.class} #{@name}>"

    # A Hash with the fields many LLM libraries take for a function tool.
    def to_h = { name: name, description: description, parameters: params_schema }

    # Binds more RubyLLM tools for this instance only (the forms tools
    # takes), all or nothing; names may not collide with the class's or
    # each other. Raises ConfigError after the first execution (the
    # sandbox is configured then: make a new instance).
    def add_tools(*list)
      check_open!("add_tools")
      add(CodeMode.tool_bindings(list, bindings, "add_tools"), "add_tools")
    end

    # Binds MCP servers' tools for this instance only (the forms mcps
    # takes), all or nothing.
    def add_mcps(*list, **inputs)
      check_open!("add_mcps")
      servers, found = CodeMode.server_bindings(list, inputs, bindings, "add_mcps")
      add(found, "add_mcps")
      @servers.concat(servers)
      self
    end

    # The functions this instance binds: the class's, then its own
    # (Hash of name => Binding).
    def bindings = self.class.code_mode_state[:bindings].merge(@added || {})

    # @private The Sandbox executions run in, made at the first.
    def sandbox_for_execution
      @sandbox ||= begin
        st = self.class.code_mode_state
        mounts = st[:folders].map { { host: _1.source, guest: _1.dest, writable: _1.writable, description: _1.description } }
        sb = Sandbox.new(st[:limits], mounts: mounts)
        sb.bind_sb(bindings.transform_values(&:call), "tools")
        sb.guest_code!(sb: true)
      end
    end

    class << self
      # @private The tool name a class gets: its name's leaf in snake case.
      def derived_name(klass)
        leaf = klass.name.to_s.split("::").last.to_s
        raise ConfigError, "an anonymous CodeMode class has no name to derive: pass name: to new" if leaf.empty?

        snake(leaf)
      end

      # @private
      def snake(s) = s.gsub(/([A-Z]+)([A-Z][a-z])/, '\1_\2').gsub(/([a-z\d])([A-Z])/, '\1_\2').tr("-", "_").downcase

      # @private Bindings for RubyLLM tools (tools' forms), checked
      # against taken (a Hash of name => Binding); setting names the call.
      def tool_bindings(list, taken, setting)
        found = {}
        flat(list).each do |item|
          if item.is_a?(Hash)
            item.each { |n, t| bind_tool(t, n.to_s, taken, found, setting) }
          else
            bind_tool(item, nil, taken, found, setting)
          end
        end
        found
      end

      # @private [servers, bindings] for MCP servers (mcps' forms).
      def server_bindings(list, inputs, taken, setting)
        servers = flat(list).map { |s| server_instance(s, inputs, setting) }
        found = {}
        servers.each do |server|
          sname = snake(server_name(server))
          tools = begin
            Array(server.tools)
          rescue StandardError => e
            raise ConfigError, "#{setting}: the MCP server #{sname} could not list its tools: #{e.class}: #{e.message}"
          end
          tools.each do |tool|
            tname = tool_name(tool)
            name = tname
            name = "#{sname}_#{tname}" if taken.key?(name) || found.key?(name)
            if taken.key?(name) || found.key?(name)
              raise ConfigError, "#{setting}: the MCP server #{sname}'s tool #{tname} collides with #{name.inspect}, bound already"
            end

            found[name] = Binding.new(name: name, description: text_of(tool, :description), params: mcp_schema(tool),
                                      call: mcp_adapter(tool), source: tool, server: sname)
          end
        end
        [servers, found]
      end

      # @private The JSON Hash the model reads for r (seed 002's shape).
      def output_for(r)
        out = { "status" => r.status.to_s }
        case r.status.to_s
        when "ok"
          out["value"] = GuestCode.json_safe(r.value)
          out["stdout"] = r.stdout unless r.stdout.empty?
        when "error"
          out["error"] = { "class" => r.error.class_name, "message" => r.error.message, "backtrace" => r.error.backtrace }
          out["stdout"] = r.stdout unless r.stdout.empty?
        when "sandbox_error"
          out["error"] = r.error&.message.to_s
          out["stderr"] = r.stderr unless r.stderr.empty?
        else
          out["error"] = limit_message(r)
          out["stdout"] = r.stdout unless r.stdout.empty?
        end
        out
      end

      private

      def flat(list) = list.flatten.compact

      def bind_tool(tool, name, taken, found, setting)
        if tool.is_a?(Class) && tool <= CodeMode || tool.is_a?(CodeMode)
          raise ConfigError, "#{setting}: #{tool.is_a?(Class) ? tool : tool.class} is a CodeMode; a CodeMode cannot be bound inside another"
        end

        obj = tool.is_a?(Class) ? instance_of_tool(tool, setting) : tool
        name ||= snake(obj.class.name.to_s.split("::").last.to_s)
        raise ConfigError, "#{setting}: #{obj.class} has no name to bind it under; pass \"name\" => tool" if name.empty?
        raise ConfigError, "#{setting}: #{name} is bound already (by #{(taken[name] || found[name]).source.class})" if taken.key?(name) || found.key?(name)

        found[name] = Binding.new(name: name, description: text_of(obj, :description), params: tool_schema(obj, name, setting),
                                  call: tool_adapter(obj, name), source: obj, server: nil)
      end

      def instance_of_tool(klass, setting)
        klass.new
      rescue ArgumentError => e
        raise ConfigError, "#{setting}: #{klass}.new needs arguments (#{e.message}); bind a ready instance instead"
      end

      # The JSON Schema of obj's arguments: its params_schema, its
      # declared parameters, or its execute's keywords; refuses an
      # execute that cannot take keywords.
      def tool_schema(obj, name, setting)
        raise ConfigError, "#{setting}: #{name} (#{obj.class}) has no execute method; bind RubyLLM::Tool classes or instances" unless obj.respond_to?(:execute)

        ps = obj.method(:execute).parameters
        positional = ps.select { %i[req opt rest].include?(_1[0]) }.map { _1[1] }
        unless positional.empty?
          raise ConfigError, "#{setting}: #{name} (#{obj.class}#execute) takes positional arguments (#{positional.join(", ")}); " \
                             "a bound tool is called with keywords: def execute(#{positional.map { "#{_1}:" }.join(", ")})"
        end
        declared = declared_schema(obj)
        takes_kw = ps.any? { %i[key keyreq keyrest].include?(_1[0]) }
        if !takes_kw && declared && !declared.fetch("properties", {}).empty?
          raise ConfigError, "#{setting}: #{name} (#{obj.class}#execute) takes no keywords, but the tool declares parameters " \
                             "(#{declared["properties"].keys.join(", ")}); give execute those keywords"
        end
        declared || signature_schema(ps)
      end

      def declared_schema(obj)
        if obj.respond_to?(:params_schema) && (s = safely { obj.params_schema }).is_a?(Hash)
          return JSON.parse(JSON.generate(s))
        end

        params = obj.class.respond_to?(:parameters) && safely { obj.class.parameters }
        return nil unless params.is_a?(Hash) && !params.empty?

        props = {}
        req = []
        params.each do |pname, p|
          props[pname.to_s] = { "type" => (read(p, :type) || "string").to_s, "description" => (read(p, :description) || read(p, :desc)).to_s }
          req << pname.to_s unless read(p, :required) == false
        end
        { "type" => "object", "properties" => props, "required" => req }
      end

      def signature_schema(ps)
        props = {}
        req = []
        ps.each do |type, pname|
          next unless %i[key keyreq].include?(type)

          props[pname.to_s] = { "type" => "string" }
          req << pname.to_s if type == :keyreq
        end
        { "type" => "object", "properties" => props, "required" => req }
      end

      def read(p, attr)
        p.respond_to?(attr) ? p.public_send(attr) : (p.is_a?(Hash) ? p[attr] || p[attr.to_s] : nil)
      end

      def safely
        yield
      rescue StandardError
        nil
      end

      # Calls obj.execute with the guest's keywords: arguments its
      # execute cannot take come back as {"error" => ...} (RubyLLM's
      # recoverable-failure convention); its answer JSON-round-tripped;
      # its exception SB::ToolError (class and message) in the guest.
      def tool_adapter(obj, name)
        ps = obj.method(:execute).parameters
        required = ps.select { _1[0] == :keyreq }.map(&:last)
        known = ps.select { %i[key keyreq].include?(_1[0]) }.map(&:last)
        rest = ps.any? { _1[0] == :keyrest }
        lambda do |**kw|
          missing = required - kw.keys
          unknown = rest ? [] : kw.keys - known
          unless missing.empty? && unknown.empty?
            why = [missing.empty? ? nil : "missing #{missing.join(", ")}", unknown.empty? ? nil : "unknown #{unknown.join(", ")}"].compact
            next { "error" => "Invalid tool arguments for #{name}: #{why.join("; ")}" }
          end
          GuestCode.json_safe(kw.empty? ? obj.execute : obj.execute(**kw))
        rescue StandardError => e
          raise GuestCode::Raised.new(e.message, GuestCode.class_leaf(e))
        end
      end

      def server_instance(s, inputs, setting)
        s = begin
          s.is_a?(Class) ? s.new(**inputs) : s
        rescue StandardError => e
          raise ConfigError, "#{setting}: #{s}.new#{inputs.empty? ? "" : "(#{inputs.keys.join(", ")}:)"} failed: #{e.class}: #{e.message}"
        end
        raise ConfigError, "#{setting}: #{s.class} is not an MCP server (it has no tools)" unless s.respond_to?(:tools)

        s
      end

      def server_name(server)
        n = server.respond_to?(:name) ? server.name.to_s : ""
        n.empty? ? server.class.name.to_s.split("::").last.to_s : n
      end

      def tool_name(tool)
        n = tool.respond_to?(:name) ? tool.name.to_s : ""
        raise ConfigError, "mcps: a server's tool (#{tool.class}) has no name" if n.empty?

        n
      end

      def text_of(obj, attr) = (obj.respond_to?(attr) ? safely { obj.public_send(attr) } : nil).to_s

      def mcp_schema(tool)
        m = %i[input_schema params_schema].find { tool.respond_to?(_1) }
        s = m && safely { tool.public_send(m) }
        s.is_a?(Hash) ? JSON.parse(JSON.generate(s)) : { "type" => "object" }
      end

      # Calls an MCP tool with the guest's arguments (String keys) and
      # answers {text:, structured:, error:}.
      def mcp_adapter(tool)
        lambda do |**kw|
          args = GuestCode.json_safe(kw)
          r = tool.respond_to?(:call) ? tool.call(args) : tool.execute(**kw)
          mcp_result(r)
        rescue StandardError => e
          raise GuestCode::Raised.new(e.message, GuestCode.class_leaf(e))
        end
      end

      def mcp_result(r)
        h = r.is_a?(Hash) ? r.transform_keys(&:to_s) : nil
        text, structured, error =
          if h&.key?("content") || h&.key?("structuredContent") || h&.key?("isError")
            [Array(h["content"]).filter_map { |c| (c["text"] || c[:text]) if (c["type"] || c[:type]).to_s == "text" }.join("\n"),
             h["structuredContent"], h["isError"] ? true : false]
          elsif h&.key?("error")
            [h["error"].to_s, nil, true]
          elsif r.is_a?(String) then [r, nil, false]
          else
            [(r.respond_to?(:text) ? r.text : r.to_s), (r.respond_to?(:structured_content) ? r.structured_content : nil),
             (r.respond_to?(:error?) ? r.error? : false) ? true : false]
          end
        { "text" => text.to_s, "structured" => GuestCode.json_safe(structured), "error" => error }
      end

      def limit_message(r)
        what = { "timeout" => "the wall-clock limit ran out", "fuel_exhausted" => "the CPU budget (fuel) ran out",
                 "memory_limit" => "the memory limit was reached", "tool_budget_exceeded" => "too many host tool calls, or too long in them",
                 "canceled" => "the run was canceled" }[r.status.to_s]
        [what, r.error&.message].compact.uniq.join(": ")
      end
    end

    private

    def add(found, setting)
      all = bindings.merge(found)
      raise ConfigError, "#{setting}: #{all.size} tools bound, more than #{MAX_TOOLS}" if all.size > MAX_TOOLS

      @added = @added.merge(found)
      @description = nil
      self
    end

    def check_open!(setting)
      raise ConfigError, "#{setting}: glovebox's own CodeMode (made from a sandbox) binds nothing; expose on the Sandbox" if @sandbox_given
      raise ConfigError, "#{setting}: the sandbox is configured at the first execution; make a new instance to bind more" if @sandbox
    end

    # seed 002's description: how to use, the folders, the host tools.
    def describe
      st = self.class.code_mode_state
      prof = st[:limits]
      timeout = prof.timeout || Glovebox.config.timeout || 10
      b = +"Runs a complete, self-contained Ruby program in a sandbox and returns a JSON object with its status, " \
           "the value of its last expression and what it printed.\n"
      b << "\n## How to use\n\n"
      b << "- The code runs as a fresh Ruby 4.0 process (CRuby compiled to WebAssembly), isolated from the host: no network, " \
           "no subprocesses, no threads, no host files#{st[:folders].empty? ? "" : " but the folders below"}. Nothing carries " \
           "over between runs: each program does all its work itself. /tmp is a private scratch directory, empty at the start " \
           "and wiped after each run.\n"
      b << "- The standard library is there: require \"json\", \"csv\", \"set\", \"date\", \"time\", \"digest\", ... work; no other gems.\n"
      b << "- The value of the last expression comes back as JSON (symbols become strings, other objects their inspect), " \
           "with what the program printed with puts.\n"
      b << "- A run is stopped after #{format_seconds(timeout)} of wall-clock time"
      b << "; #{count(bindings.empty? ? 0 : (prof.tool_calls || 1000))} host tool calls at most" unless bindings.empty?
      b << ". The result's status says which limit stopped it: \"timeout\", \"fuel_exhausted\", \"memory_limit\".\n"
      b << "- status is \"ok\" with value and stdout, or \"error\" with error: {class, message, backtrace} (lines " \
           "\"sandbox:N\" are your program's): read the error, fix the program and run it again.\n"
      folders(b, st[:folders].reject(&:writable), "Read-only folders",
              "Readable only: writing there fails with an Errno error.")
      folders(b, st[:folders].select(&:writable), "Read-write folders",
              "Files written there stay on the host after the run.")
      describe_tools(b) unless bindings.empty?
      notes = (st[:servers] + @servers).filter_map do |s|
        text = s.respond_to?(:instructions) ? s.instructions.to_s.strip : ""
        text.empty? ? nil : "### #{CodeMode.snake(CodeMode.send(:server_name, s))}\n\n#{text}\n"
      end
      b << "\n## Server notes\n\n#{notes.join("\n")}" unless notes.empty?
      instructions = [st[:instructions], @instructions].compact.map(&:strip).reject(&:empty?)
      b << "\n## Notes\n\n#{instructions.join("\n\n")}\n" unless instructions.empty?
      b
    end

    def folders(b, list, title, note)
      return if list.empty?

      b << "\n## #{title}\n\n"
      list.each { |f| b << "- `#{f.dest}`#{f.description.to_s.empty? ? "" : " — #{f.description.gsub(/\s+/, " ")}"}\n" }
      b << "\n#{note}\n"
    end

    def describe_tools(b)
      b << "\n## Host tools\n\n"
      b << "Call them from the program with SB.call(\"name\", key: value, ...): the call blocks while the host runs the tool " \
           "and returns its result as data (Hash keys are Symbols: result[:key], or result.key). A tool that fails raises " \
           "SB::ToolError with its class and message (rescue it to carry on); a name not listed here raises SB::UnknownTool. " \
           "Bad arguments come back as {error: \"...\"}.\n"
      bindings.each_value do |bd|
        b << "\n### #{bd.name}\n\n"
        b << "#{bd.description.gsub(/\s+/, " ").strip}\n" unless bd.description.strip.empty?
        b << "(a tool of the MCP server #{bd.server}: it returns {text:, structured:, error:})\n" if bd.server
        props = bd.params.fetch("properties", {})
        required = Array(bd.params["required"])
        unless props.empty?
          b << "\nParameters:\n"
          props.each do |pn, ps|
            ps = ps.is_a?(Hash) ? ps : {}
            b << "- #{pn} (#{[ps["type"], required.include?(pn) ? "required" : "optional"].compact.join(", ")})"
            b << ": #{ps["description"].to_s.gsub(/\s+/, " ")}" unless ps["description"].to_s.strip.empty?
            b << "\n"
          end
        end
        example = props.keys.select { required.include?(_1) }.map { |pn| "#{pn}: #{example_value(props[pn])}" }
        b << "\nExample: SB.call(#{bd.name.dump}#{example.map { ", #{_1}" }.join})\n"
      end
    end

    def example_value(schema)
      case schema.is_a?(Hash) && schema["type"]
      when "integer", "number" then "1"
      when "boolean" then "true"
      when "array" then "[]"
      when "object" then "{}"
      else '"..."'
      end
    end

    def format_seconds(s) = s == s.to_i ? "#{s.to_i} s" : "#{s} s"

    def count(n) = n.to_s.reverse.scan(/\d{1,3}/).join(",").reverse

    # ---- glovebox's own code mode, over a Sandbox the app made ----

    def init_glovebox(sandbox, name, instructions, max_output, docs)
      @sandbox_given = true
      @target = sandbox
      @sb = sandbox.is_a?(Session) ? sandbox.instance_variable_get(:@sb) : sandbox
      @session = sandbox.is_a?(Session)
      gated = @sb.instance_variable_get(:@gated)
      tools = @sb.exposed_functions.map do |n|
        d = docs[n] || docs[n.to_s]
        if d.nil? && (host = @sb.host_doc(n)) # the HTTP tool's or an MCP server's, as the child documents it
          next host.merge("name" => n.to_s, "needs_approval" => gated.include?(n))
        end

        d ||= {}
        { "name" => n.to_s, "description" => d[:description].to_s, "returns" => d[:returns].to_s,
          "example" => d[:example].to_s, "needs_approval" => gated.include?(n),
          "params" => d[:params] ? Array(d[:params]).map { |p| p.transform_keys(&:to_s) } : @sb.tool_params(n) }
      end
      lim = @sb.limits
      servers = @sb.mcp_servers
      @base = { "name" => name, "instructions" => instructions, "max_output" => max_output, "session" => @session,
                "tools" => tools, "limits" => @sb.wire_limits, "tool_calls" => lim[:tool_calls],
                "tool_time_ms" => lim[:tool_time] && (lim[:tool_time] * 1000).round,
                "servers" => servers.empty? ? nil : servers, "profile" => @sb.remote_profile }.compact
      info = @sb.code_mode_request(@base)
      @name = info["name"]
      @description = info["description"]
      @parameters = JSON.parse(JSON.generate(info["input_schema"]))
    end

    def call_glovebox(code)
      @last_result = @target.eval(code)
      out = @sb.code_mode_request(@base.merge("result" => @last_result.raw.merge(
        "tool_calls" => @last_result.tool_calls.map { |c| transcript_entry(c) }
      )))
      JSON.generate(out["output"])
    end

    def transcript_entry(c)
      { "name" => c.name, "args" => Value.to_wire(c.args, 0), "kwargs" => Value.to_wire(c.kwargs, 0),
        "result" => safe(c.result), "error" => c.error, "outcome" => c.outcome, "approval" => c.approval,
        "duration_ms" => c.duration.to_f * 1000, "elided" => c.elided || nil }.compact
    end

    def safe(v)
      Value.to_wire(v, 0)
    rescue ValueError
      nil
    end
  end
end
