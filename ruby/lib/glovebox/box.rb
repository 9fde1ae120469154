# frozen_string_literal: true

module Glovebox
  # A Box that runs nothing (Box.null, or backend: :null) was asked to
  # run: hermetic's "fails loud". Nothing ran.
  class DisabledError < Error; end

  # What a run did (a record in state "completed"): +exit_status+
  # Integer (124 after a timeout, 128+N for a signal; 137 when canceled
  # or killed), +stdout+ and +stderr+ binary Strings, +timed_out+,
  # +killed_for_memory+, +canceled+, +stdout_truncated+,
  # +stderr_truncated+ booleans, +duration+ seconds, +isolation+
  # ("namespaces", "gvisor", "vendor_vm", ...), +outputs+ Hash of path =>
  # binary String (files left in ./outputs), +outputs_truncated+ true when
  # files of ./outputs were left out (over the output_files or size
  # limits, or not regular files: links, FIFOs), +key+ the idempotency
  # key, +attached+ true when this answer came from an earlier request
  # under the key (a retry), +backend+ the backend that ran it, +trust+
  # the trust domain it ran in (a Symbol, Box#trust's).
  #
  # A superset of hermetic's and Silas's result: stdout, stderr,
  # exit_status, success?, timed_out?, trust.
  RunResult = Struct.new(:key, :exit_status, :stdout, :stderr, :timed_out, :killed_for_memory, :canceled,
                         :stdout_truncated, :stderr_truncated, :duration, :isolation, :outputs, :outputs_truncated, :attached,
                         :backend, :record, :trust, keyword_init: true) do
    # Exit status 0 and no timeout.
    def success? = exit_status.zero? && !timed_out

    # The wall clock ran out (exit status 124).
    def timed_out? = timed_out ? true : false

    # The memory limit killed it (exit status 137).
    def killed_for_memory? = killed_for_memory ? true : false

    # Box#cancel (or the child's end) killed it (exit status 137).
    def canceled? = canceled ? true : false

    # True when it ran off the app host (trust :remote or :vendor).
    def off_host? = Box::OFF_HOST.include?(trust)
  end

  # Runs commands in an OS sandbox, the way hermetic runs them: one run
  # call over isolation backends, a trust label on two axes, default-deny
  # environment and network.
  #
  #   box = Glovebox::Box.new                  # this host's bubblewrap or gVisor (trust :host)
  #   r = box.run("python3 -c 'print(2+2)'")   # a String runs via /bin/sh -c
  #   r.stdout  #=> "4\n"
  #   r = box.run(["sleep", "5"], timeout: 1)  # an Array execs directly, no shell
  #   r.timed_out? #=> true; r.exit_status #=> 124
  #
  # Backends, by name (backend:) or by constructor:
  #
  # | constructor                          | backend  | isolation  | trust   |
  # |--------------------------------------|----------|------------|---------|
  # | Box.new / Box.bwrap                  | :bwrap   | namespaces | :host   |
  # | Box.gvisor                           | :gvisor  | gvisor     | :host   |
  # | Box.wrap(executor:, token:), or any  | :remote  | the        | :remote |
  # | of the above with executor:          |          | executor's |         |
  # | Box.hosted(:e2b, api_key:)           | :e2b     | vendor_vm  | :vendor |
  # | Box.null                             | :null    | none       | :none   |
  #
  # Box.new without backend: takes the first of bubblewrap and gVisor
  # this host has (through an executor when Glovebox.executor is set).
  # Local boxes run in the glovebox child the gem starts (embedded); a
  # remote one talks HTTPS to a glovebox executor, with idempotency keys
  # and in-doubt errors (InDoubtError).
  class Box
    # The trust domains off the app host (hermetic's off_host? rule).
    OFF_HOST = %i[remote vendor].freeze
    # The backend names Box.new takes.
    BACKENDS = %i[bwrap gvisor remote e2b null].freeze
    # The limits a run takes (limits:), with their units.
    LIMIT_UNITS = { memory: :bytes, cpus: :cores, pids: :count, output: :bytes, disk: :bytes,
                    output_files: :bytes }.freeze

    attr_reader :client, :backend

    # A bubblewrap box on this host (namespaces + seccomp; trust :host),
    # or with executor: a client of that executor (trust :remote).
    def self.bwrap(**opts) = new(backend: :bwrap, **opts)

    # A gVisor box on this host (runsc; trust :host), or with executor: a
    # client of that executor (trust :remote). image: is refused
    # (ConfigError): glovebox's gVisor box runs the host's /usr read-only
    # and has no container images.
    def self.gvisor(image: nil, **opts)
      raise ConfigError, image_refusal(image) if image

      new(backend: :gvisor, **opts)
    end

    # A box that runs nothing: trust :none, enabled? false, and every run
    # raises DisabledError (for a deployment where code must not run).
    def self.null = new(backend: :null)

    # A client of a glovebox executor (trust :remote, off_host? true):
    # executor: its https URL, token: the tenant's bearer token, ca_file:
    # its CA (nil: the system's roots). Without executor: or client:,
    # Glovebox.executor's.
    def self.wrap(executor: nil, token: nil, ca_file: nil, client: nil, **opts)
      new(backend: :remote, executor: executor, token: token, ca_file: ca_file, client: client, **opts)
    end

    # A hosted vendor's sandbox: only :e2b is served (trust :vendor,
    # off-host by construction). api_key: a String or a callable resolved
    # at each run (never logged or stored); template: the E2B template
    # ("base"); api_url: E2B's control API (default E2B's public one;
    # plain http only on loopback);
    # envd_url: the sandboxes' envd base URL (default E2B's, per
    # sandbox; set for a self-hosted or test service). Raises ConfigError
    # for another vendor or a missing api_key:.
    def self.hosted(vendor, api_key: nil, template: nil, api_url: nil, envd_url: nil, **opts)
      unless vendor.to_s == "e2b"
        raise ConfigError, "hosted: #{vendor.inspect} is not served: glovebox's hosted backend is :e2b " \
                           "(or run off-host with Glovebox::Box.wrap(executor:, token:))"
      end
      new(backend: :e2b, hosted: { api_key: api_key, template: template, api_url: api_url, envd_url: envd_url }, **opts)
    end

    # hermetic's Docker backend is not served by the gem: raises
    # ConfigError saying what to use (Box.new runs the same commands
    # under bubblewrap on this host; Box.gvisor under gVisor).
    def self.docker(**)
      raise ConfigError, "docker: the gem does not drive Docker; Glovebox::Box.new (bubblewrap) or .gvisor runs " \
                         "commands on this host, Glovebox::Box.wrap(executor:, token:) off it"
    end

    # hermetic's Firecracker backend is not served: raises ConfigError
    # (glovebox has no microVM launcher yet; docs/boxes.md).
    def self.firecracker(**)
      raise ConfigError, "firecracker: glovebox has no microVM launcher yet; use Glovebox::Box.gvisor on this host " \
                         "or Glovebox::Box.wrap(executor:, token:) off it"
    end

    # @private
    def self.image_refusal(image)
      "image: #{image.inspect}: glovebox's local boxes run commands on this host's /usr (read-only), not in a " \
        "container image; drop image: (put what the command needs in files:, or run it on an executor whose host has it)"
    end

    # backend: :bwrap, :gvisor (this host's), :remote (an executor's:
    # needs executor: or client:, or Glovebox.executor), :e2b (use
    # Box.hosted), :null, or nil: the first of bubblewrap and gVisor this
    # host has, or the executor's when one is configured. executor:,
    # token:, ca_file:, client: as for Sandbox; with one, the box is a
    # client of that executor (a local backend name then only says what
    # the executor is expected to run: its operator chooses). credentials:
    # {"NAME" => String or callable} put in every run's environment,
    # resolved at each run (see #run). Raises ConfigError for an unknown
    # backend, :remote without an executor, :e2b without api_key:.
    def initialize(backend: nil, executor: nil, token: nil, ca_file: nil, client: nil, credentials: nil, hosted: nil)
      name = backend&.to_sym
      unless name.nil? || BACKENDS.include?(name)
        raise ConfigError, "backend: #{backend.inspect} is not one of #{BACKENDS.map(&:inspect).join(", ")}"
      end

      @client = %i[null e2b].include?(name) ? nil : Sandbox.client_for(executor, token, ca_file, client)
      if name == :remote && @client.nil?
        raise ConfigError, "backend: :remote needs executor: (an https URL) and token:, or Glovebox.executor"
      end
      if (executor || client) && %i[null e2b].include?(name)
        raise ConfigError, "executor: a #{name} box runs nowhere near an executor; drop executor:"
      end
      @backend = @client ? :remote : name
      @requested = name
      @credentials = Box.check_credentials(credentials, "credentials")
      @hosted = Box.check_hosted(hosted) if name == :e2b
    end

    # Where commands run, hermetic's labels: :remote through an executor,
    # :vendor for a hosted vendor (E2B), :host for a box on this host
    # (bubblewrap, gVisor: next to the app's secrets), :none for Box.null.
    def trust
      case @backend
      when :remote then :remote
      when :e2b then :vendor
      when :null then :none
      else :host
      end
    end

    # True only for trust :remote and :vendor: an escape does not land on
    # the app host. The guard: raise "..." unless box.off_host?
    def off_host? = OFF_HOST.include?(trust)

    # False for Box.null, else true (hermetic's and Silas's run/enabled?
    # duck type).
    def enabled? = @backend != :null

    # The backend and isolation: the executor's {"backend", "isolation",
    # ...}, or embedded this host's {"backend", "isolation", "trust"} (or
    # {"error"} saying why there is none; starting the child). A null or
    # hosted box answers without asking anyone.
    def info
      return { "backend" => "null", "isolation" => "none", "trust" => "none" } if @backend == :null
      return { "backend" => "e2b", "isolation" => "vendor_vm", "trust" => "vendor" } if @backend == :e2b
      return @client.info if @client

      Child.current.info["box"]
    end

    # Runs command: a String runs via /bin/sh -c (shell: is the same), an
    # Array of Strings execs directly (no shell, no injection surface).
    #
    # - files: {"name" => String} written into the fresh working
    #   directory; stdin: String;
    # - env: {"NAME" => String}: the command's whole environment (nothing
    #   of the app's: default deny) besides PATH, HOME, TMPDIR, LANG;
    # - credentials: like env, each value a String or a callable resolved
    #   now, at this run (merged over the Box's own), never logged, stored,
    #   or part of what a key names;
    # - network: :none, nil or [] (no network: an empty network
    #   namespace), or an Array of host names (or {allow: [...]}) reachable
    #   over HTTP(S) through an egress proxy that applies the HTTP tool's
    #   address rules;
    # - timeout: seconds (Numeric; default 30): at it the whole process
    #   tree is killed, exit status 124, RunResult#timed_out?;
    # - limits: {memory:, cpus:, pids:, output:, disk:, output_files:}
    #   as hermetic writes them: sizes as bytes (Integer) or a String with
    #   a unit, k, m, g or t (powers of 1024: "512m", "1g"; "512MiB" and
    #   "64KB" also read as 1024-based), cpus a number of cores ("1", 0.5),
    #   pids a count (256 or "256");
    # - key: an idempotency key (1-128 of A-Z a-z 0-9 . _ : -; default a
    #   fresh random one, so every call without one runs); expires_at: a
    #   Time after which it should not start;
    # - on_output: a block ->(stream, bytes) with stream :stdout or
    #   :stderr, called as the command writes.
    #
    # Returns a RunResult (any exit status, a timeout included). Raises
    # ConfigError before anything is sent for an option that does not
    # parse (naming it: limits: memory: "512x", an unknown limit, a
    # network: that is neither :none nor host names), DisabledError for
    # Box.null; through an executor, RunError for a run that did not
    # complete ("failed", "lost": the executor stopped while it ran and
    # will not run it again under this key, "expired"), InDoubtError
    # when the connection broke after the request was sent (retry with
    # #retry or key: err.key), ConnectionError when nothing was sent,
    # APIError for a refusal (request_too_large, invalid_command,
    # key_conflict, queue_full, ...).
    #
    # On this host the run keeps no record: a key names it for #cancel
    # only (the same key again runs again), nothing is in doubt (the
    # child dying mid-run raises ChildError), and a host without
    # bubblewrap or gVisor raises APIError "unavailable" saying so.
    def run(command = nil, shell: nil, files: {}, stdin: nil, env: {}, credentials: nil, network: nil,
            timeout: nil, limits: {}, key: nil, expires_at: nil, &on_output)
      raise DisabledError, "glovebox: this box is the null box (Glovebox::Box.null): it runs nothing" if @backend == :null

      cmd = Box.command(command, shell)
      cmd["network"] = Box.network_for(network)
      cmd["limits"] = Box.limits_for(limits)
      cmd["files"] = files.to_h { |k, v| [k.to_s, [v.to_s.b].pack("m0")] } unless files.nil? || files.empty?
      cmd["stdin"] = [stdin.b].pack("m0") if stdin
      cmd["env"] = env.to_h { |k, v| [k.to_s, v.to_s] } unless env.nil? || env.empty?
      cmd["timeout_ms"] = Box.timeout_ms(timeout) if timeout
      key ||= Keys.fresh("r-")
      req = { "idempotency_key" => key, "command" => cmd }
      creds = @credentials.merge(Box.check_credentials(credentials, "credentials"))
      req["credentials"] = creds.to_h { |k, v| [k, (v.respond_to?(:call) ? v.call : v).to_s] } unless creds.empty?
      req["expires_at"] = expires_at.utc.strftime("%Y-%m-%dT%H:%M:%S.%NZ") if expires_at
      unless @client
        raise APIError.new("expired", "the run's expires_at has passed", from: "glovebox") if expires_at && Time.now > expires_at

        return embedded_run(cmd, req, &on_output)
      end
      record = nil
      attached = false
      @client.stream("/v1/runs", req, key) do |ev|
        case ev["type"]
        when "accepted" then attached = ev["attached"] || false
        when "stdout", "stderr" then on_output&.call(ev["type"].to_sym, ev["data"].to_s.unpack1("m0"))
        when "result" then record = ev["record"]
        end
      end
      to_result(record, attached)
    end

    # Sends the run an InDoubtError came from again, under its key, with
    # the same arguments: it attaches to the run or returns its record.
    # The command must be the same (else APIError "key_conflict").
    def retry(error, *argv, **opts, &blk) = run(*argv, **opts, key: error.key, &blk)

    # The record of the run under key (GET /v1/runs/{key}): a RunResult
    # once completed; raises RunError for failed/lost/expired, APIError
    # "not_found" for a key never used (or another tenant's).
    # Local and hosted runs keep no records: ConfigError.
    def lookup(key)
      raise ConfigError, "runs on this host keep no records: lookup needs an executor" unless @client

      to_result(@client.request(:get, "/v1/runs/#{key}"), true)
    end

    # Cancels the run under key (DELETE): a queued run ends "failed"
    # ("canceled"), a running one is killed (RunResult#canceled?).
    # Embedded, a running one is killed (its run returns with canceled
    # set) and this returns nil; APIError "not_found" when none runs.
    def cancel(key)
      return to_result(@client.request(:delete, "/v1/runs/#{key}"), true) if @client

      (Child.running || raise(APIError.new("not_found", "nothing runs under key #{key}", from: "glovebox")))
        .control({ "op" => "cancel", "key" => key })
      nil
    end

    # A line for consoles and logs: the backend and the trust; never a
    # credential, token or API key.
    def inspect = "#<#{self.class.name} backend=#{(@backend || :auto).inspect} trust=#{trust.inspect}>"

    class << self
      # @private The command's wire form: a String (or shell:) runs via
      # /bin/sh -c, an Array execs directly.
      def command(command, shell)
        raise ConfigError, "run: give the command or shell:, not both" if command && shell

        case command
        when nil
          raise ConfigError, "run: no command: give a String (run via /bin/sh -c) or an Array (exec'd directly)" if shell.nil?

          { "shell" => shell.to_str }
        when String then { "shell" => command }
        when Array
          raise ConfigError, "run: the argv Array is empty" if command.empty?

          { "argv" => command.map { |a| a.is_a?(Symbol) || a.is_a?(Numeric) ? a.to_s : a.to_str } }
        else
          raise ConfigError, "run: the command is a #{command.class}; give a String (run via /bin/sh -c) or an Array of Strings"
        end
      end

      # @private network: as the wire's {"allow" => [...]}.
      def network_for(network)
        hosts = case network
                when nil, :none, "none", false then []
                when Array then network
                when Hash
                  bad = network.keys.map(&:to_sym) - [:allow]
                  raise ConfigError, "network: unknown key(s) #{bad.join(", ")}; give {allow: [hosts]}" unless bad.empty?

                  Array(network[:allow] || network["allow"])
                else
                  raise ConfigError, "network: #{network.inspect}: give :none, or an Array of host names the command may " \
                                     "reach over HTTP(S) (an egress allowlist)"
                end
        hosts.each do |h|
          unless (h.is_a?(String) || h.is_a?(Symbol)) && !h.to_s.empty? && !h.to_s.match?(%r{[\s/:]})
            raise ConfigError, "network: #{h.inspect} is not a host name (api.example.com, *.example.com)"
          end
        end
        hosts.empty? ? {} : { "allow" => hosts.map(&:to_s) }
      end

      # @private limits: as the wire's (bytes, cores, counts), each
      # parsed; raises ConfigError naming the key.
      def limits_for(limits)
        raise ConfigError, "limits: give a Hash (memory:, cpus:, pids:, output:, disk:, output_files:)" unless limits.is_a?(Hash)

        limits.each_with_object({}) do |(k, v), out|
          unit = LIMIT_UNITS[k.to_sym]
          raise ConfigError, "limits: unknown key #{k.inspect}; the limits are #{LIMIT_UNITS.keys.join(", ")}" unless unit
          next if v.nil?

          out[k.to_s] = case unit
                        when :bytes then size(v, "limits: #{k}")
                        when :cores then cores(v, "limits: #{k}")
                        else count(v, "limits: #{k}")
                        end
        end
      end

      # Multipliers of the size units (hermetic and Docker write "512m").
      SIZE_UNITS = { "" => 1, "b" => 1, "k" => 1 << 10, "m" => 1 << 20, "g" => 1 << 30, "t" => 1 << 40 }.freeze

      # @private A size: a positive Integer of bytes, or a String with
      # an optional unit (k, m, g, t; a trailing "b" or "ib" allowed:
      # "512m", "512MB", "512MiB" are all 512 × 2^20).
      def size(v, what)
        return v if v.is_a?(Integer) && v.positive?

        m = v.is_a?(String) ? v.strip.match(/\A(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\z/i) : nil
        n = m ? (m[1].to_r * SIZE_UNITS.fetch(m[2].downcase)).floor : nil
        unless n&.positive?
          raise ConfigError, "#{what}: #{v.inspect} is not a size: give bytes (an Integer) or a number with a unit " \
                             "k, m, g or t, powers of 1024 (\"512m\", \"1g\")"
        end
        n
      end

      # @private A CPU quota in cores: a positive number or a String of
      # one ("1", "0.5").
      def cores(v, what)
        f = case v
            when Numeric then v.to_f
            when String then Float(v.strip, exception: false)
            end
        raise ConfigError, "#{what}: #{v.inspect} is not a number of cores (\"1\", 0.5)" unless f&.finite? && f.positive?

        f
      end

      # @private A positive count: an Integer or a String of digits.
      def count(v, what)
        n = case v
            when Integer then v
            when String then Integer(v.strip, 10, exception: false)
            end
        raise ConfigError, "#{what}: #{v.inspect} is not a positive whole number" unless n&.positive?

        n
      end

      # @private Seconds (Numeric) as milliseconds.
      def timeout_ms(t)
        raise ConfigError, "timeout: #{t.inspect} is not a positive number of seconds" unless t.is_a?(Numeric) && t.positive? && t.to_f.finite?

        (t * 1000).round
      end

      # @private credentials: as {"NAME" => String or callable}.
      def check_credentials(creds, what)
        return {} if creds.nil?
        raise ConfigError, "#{what}: give a Hash of NAME => String or callable" unless creds.is_a?(Hash)

        creds.to_h do |k, v|
          name = k.to_s
          raise ConfigError, "#{what}: #{k.inspect} is not an environment variable name" if name.empty? || name.match?(/[=\0]/)
          raise ConfigError, "#{what}: #{name}: give a String or a callable (->{ Vault.fetch(...) })" unless v.is_a?(String) || v.respond_to?(:call)

          [name, v]
        end
      end

      # @private Box.hosted's settings, checked.
      def check_hosted(h)
        h ||= {}
        key = h[:api_key]
        raise ConfigError, "api_key: the E2B key is missing (a String, or a callable resolved at each run)" if key.nil? || key == ""
        raise ConfigError, "api_key: give a String or a callable" unless key.is_a?(String) || key.respond_to?(:call)

        %i[api_url envd_url].each do |k|
          v = h[k]
          next if v.nil?
          raise ConfigError, "#{k}: #{v.inspect} is not an http(s) URL" unless v.to_s.match?(%r{\Ahttps?://[^/\s]+}i)
        end
        h
      end
    end

    private

    def to_result(record, attached)
      return nil if record.nil?
      raise RunError, record unless record["state"] == "completed"

      r = record["result"] || {}
      b = ->(s) { s.to_s.unpack1("m0") }
      RunResult.new(key: record["key"], exit_status: r["exit_status"], stdout: b.(r["stdout"]), stderr: b.(r["stderr"]),
                    timed_out: r["timed_out"] || false, killed_for_memory: r["killed_for_memory"] || false,
                    canceled: r["canceled"] || false, stdout_truncated: r["stdout_truncated"] || false,
                    stderr_truncated: r["stderr_truncated"] || false, duration: r["duration_ms"].to_f / 1000,
                    isolation: r["isolation"], outputs: (r["outputs"] || {}).transform_values { |v| b.(v) },
                    outputs_truncated: r["outputs_truncated"] || false,
                    attached: attached, backend: record["backend"], record: record, trust: trust)
    end
  end
end
