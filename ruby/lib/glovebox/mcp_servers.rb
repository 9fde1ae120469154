# frozen_string_literal: true

module Glovebox
  # MCP servers whose tools the guest calls as Ruby functions
  # (Sandbox.new(mcp: [...]), Go's mcptools run in the embedded child;
  # docs/mcp.md, "Bound MCP servers"): the child starts each server (a
  # stdio command) or connects to it (a Streamable HTTP URL, with headers
  # that stay in the child: the guest never sees them), lists its tools
  # and binds every one; the guest calls them with keyword arguments,
  # checked against each tool's inputSchema, and gets a Hash: "text" (the
  # text content joined), "structured" (the parsed structuredContent, or
  # nil), "error" (true when the server flagged the result isError) and
  # "content" (the other items). Failures raise Glovebox::MCPArgumentError,
  # MCPTransportError, MCPServerCrashError, MCPProtocolError or
  # MCPTimeoutError in the guest (all Glovebox::ToolError).
  #
  #   servers = Glovebox::MCPServers.new([{ name: "memory", command: ["npx", "-y", "@modelcontextprotocol/server-memory"] },
  #                                       { name: "docs", url: "https://docs.example.com/mcp",
  #                                         headers: { "Authorization" => "Bearer #{token}" } }])
  #   sandbox = Glovebox::Sandbox.new(tools: MyTools.new, mcp: servers)   # or mcp: [the Hashes]
  #   sandbox.eval('read_graph["text"]')
  #
  # A tool keeps its MCP name when that is a valid guest function name
  # (else it is mapped: lower case, other characters "_"); a name taken
  # already (by your tools, or an earlier server) is bound as
  # "<server>_<name>", and one still taken raises ConfigError when the
  # Sandbox is made. Servers that give instructions have them in code
  # mode's description ("Server notes").
  #
  # The servers run in the child, shared by every sandbox given the same
  # servers (the same settings), until #close, until unused for 10
  # minutes (the next call starts them again), or until the child stops
  # (at exit; each server's whole process group is killed, so none
  # outlives the app). Embedded only: through an executor, MCP servers are
  # the operator's (an eval profile's mcp_servers, profile:).
  class MCPServers < HostTools
    # The keys a server Hash takes.
    KEYS = %i[name command env pass_env dir url headers protocol_version].freeze

    # servers: an Array of Hashes (or one Hash), each {name:, command:
    # [argv]} for a stdio server (env: {"NAME" => value} set for it;
    # pass_env: names of this process's variables it gets besides PATH,
    # HOME, the locale and TMPDIR; dir: its working directory) or {name:,
    # url:, headers: {...}} for a Streamable HTTP server; protocol_version:
    # an MCP revision to ask for ("2025-11-25"; default the newest).
    # name: [a-z][a-z0-9_]*, at most 32 characters, each name once.
    # start_timeout: seconds to start a server and list its tools (default
    # 30; npx may install a package on first use), call_timeout: seconds
    # per call (default: only the eval's deadline).
    #
    # Raises ConfigError naming the server and the setting for a bad spec,
    # and, embedded, for a server that cannot be started or reached (the
    # servers are started now; nothing stays bound when one fails).
    def initialize(servers, start_timeout: nil, call_timeout: nil)
      list = servers.is_a?(Hash) ? [servers] : Array(servers)
      raise ConfigError, "mcp: give one or more servers ({name:, command:} or {name:, url:})" if list.empty?

      specs = list.each_with_index.map { |s, i| MCPServers.spec(s, i) }
      body = { "mcp" => specs }
      opts = {}
      opts["start_timeout_ms"] = HttpTool.millis(start_timeout, "mcp: start_timeout") if start_timeout
      opts["call_timeout_ms"] = HttpTool.millis(call_timeout, "mcp: call_timeout") if call_timeout
      body["mcp_options"] = opts unless opts.empty?
      @server_names = specs.map { _1["name"] }
      super(body, "mcp")
      bind! if Glovebox.config.executor.to_s.empty?
    end

    # Stops the servers in the child (a sandbox calling them afterwards
    # starts them again). Returns nil.
    def close
      unbind
      nil
    end

    def inspect = "#<#{self.class.name} #{@server_names.join(", ")}>"

    # @private One server Hash as the bind request's.
    def self.spec(server, index)
      at = "mcp: server #{index}"
      raise ConfigError, "#{at}: give a Hash ({name:, command:} or {name:, url:}), not #{server.class}" unless server.is_a?(Hash)

      h = server.transform_keys(&:to_sym)
      bad = h.keys - KEYS
      raise ConfigError, "#{at}: unknown key(s) #{bad.join(", ")}; a server takes #{KEYS.join(", ")}" unless bad.empty?

      name = h[:name].to_s
      raise ConfigError, "#{at}: name: #{h[:name].inspect}: give [a-z][a-z0-9_]*, at most 32 characters" unless name.match?(/\A[a-z][a-z0-9_]{0,31}\z/)

      at = "mcp: #{name}"
      raise ConfigError, "#{at}: give exactly one of command: (stdio) and url: (Streamable HTTP)" if h[:command].nil? == h[:url].nil?

      out = { "name" => name }
      if h[:command]
        cmd = h[:command]
        unless cmd.is_a?(Array) && !cmd.empty? && cmd.all? { _1.is_a?(String) && !_1.empty? }
          raise ConfigError, "#{at}: command: give the argv as an Array of Strings ([\"npx\", \"-y\", \"pkg\"])"
        end
        %i[url headers].each { |k| raise ConfigError, "#{at}: #{k}: goes with url:, not command:" if h[k] }
        out["command"] = cmd
        out["env"] = string_hash(h[:env], "#{at}: env") if h[:env]
        out["pass_env"] = Array(h[:pass_env]).map(&:to_s) if h[:pass_env]
        out["dir"] = File.expand_path(h[:dir].to_s) if h[:dir]
      else
        url = h[:url].to_s
        raise ConfigError, "#{at}: url: #{h[:url].inspect} is not an http(s) URL" unless url.match?(%r{\Ahttps?://[^/\s]+}i)

        %i[env pass_env dir].each { |k| raise ConfigError, "#{at}: #{k}: goes with command:, not url:" if h[k] }
        out["url"] = url
        out["headers"] = string_hash(h[:headers], "#{at}: headers") if h[:headers]
      end
      out["protocol_version"] = h[:protocol_version].to_s if h[:protocol_version]
      out
    end

    # @private A Hash of String => String.
    def self.string_hash(h, what)
      raise ConfigError, "#{what}: give a Hash of String => String" unless h.is_a?(Hash)

      h.to_h { |k, v| [k.to_s, v.to_s] }
    end

    # @private The bind refusal, naming mcp:.
    def translate(message) = message.sub(/\Amcptools: bind failed: /, "")
  end
end
