# frozen_string_literal: true

# The embedded transport: Sandbox, Session, CodeMode and Box over the
# glovebox child this process starts (Glovebox::Child), with the same
# Ruby API as over an executor. docs/embedded.md is the protocol.
module Glovebox
  class Sandbox
    # @private The Client for executor:/token:/ca_file: (or client:),
    # falling back on Glovebox.executor/token/ca_file; nil when none is
    # set: the sandbox runs embedded.
    def self.client_for(executor, token, ca_file, client)
      return client if client

      cfg = Glovebox.config
      url = executor || cfg.executor
      return nil if url.nil? || url.to_s.empty?

      Client.new(url: url, token: token || cfg.token, ca_file: ca_file || cfg.ca_file)
    end

    # The guest paths no mount may be on, under or above: glovebox's
    # scratch directory and the guest's Ruby (glovebox.ReservedGuestPaths;
    # TestRubyGemReservedGuestPaths fails when they differ).
    RESERVED_GUEST_PATHS = %w[/tmp /usr].freeze

    # @private mounts: as the child takes them: each {host:, guest:,
    # writable: false, description: nil} or security_box's {host:,
    # guest:, mode: :read_only or :read_write} (Symbol or String keys),
    # checked by glovebox's rules (Mount): the host path expanded and an
    # existing directory, the guest path absolute, normalized, not /, not
    # on, under or above a reserved path, none twice and none nested. An
    # executor's mounts are its operator's: remote mode refuses them.
    def self.mounts_for(mounts, client)
      list = normalize_mounts(mounts, "mounts:", check_host: true)
      raise ConfigError, "mounts: an executor's mounts are its operator's (not sent from here); run embedded for local mounts" if client && !list.empty?

      list.map { |m| { "host" => m[:host], "guest" => m[:guest], "writable" => m[:writable] || nil, "description" => m[:description] }.compact }
    end

    # @private mounts as [{host:, guest:, writable:, description:}],
    # checked (mounts_for's rules; the host directory only with
    # check_host:); setting names the option in messages.
    def self.normalize_mounts(mounts, setting, check_host:)
      list = Array(mounts).each_with_index.map do |m, i|
        h = (m.respond_to?(:to_h) ? m.to_h : {}).transform_keys(&:to_sym)
        bad = h.keys - %i[host guest writable mode description]
        raise ConfigError, "#{setting} unknown key(s) #{bad.join(", ")}; a mount is {host:, guest:, writable: or mode:, description:}" unless bad.empty?
        raise ConfigError, "#{setting} each mount needs host: (a directory here) and guest: (its path in the sandbox)" unless h[:host] && h[:guest]

        writable = case h[:mode]&.to_s
                   when nil then h[:writable] ? true : false
                   when "read_only", "ro" then false
                   when "read_write", "rw" then true
                   else raise ConfigError, "#{setting} mode: #{h[:mode].inspect}; a mount's mode is :read_only or :read_write"
                   end
        host = File.expand_path(h[:host].to_s)
        guest = h[:guest].to_s
        where = "#{setting} #{guest.inspect}"
        if (why = guest_path_problem(guest))
          raise ConfigError, "#{where}: #{why}"
        end
        if check_host && !File.directory?(host)
          raise ConfigError, "#{where}: the host directory #{host} #{File.exist?(host) ? "is not a directory" : "does not exist"}"
        end
        { host: host, guest: guest, writable: writable, description: h[:description]&.to_s }.compact
      end
      list.each_with_index do |m, i|
        list[0...i].each do |o|
          raise ConfigError, "#{setting} #{m[:guest]} is mounted twice" if o[:guest] == m[:guest]
          raise ConfigError, "#{setting} #{o[:guest]} and #{m[:guest]} nest; mount them side by side" if nested?(o[:guest], m[:guest])
        end
      end
      list
    end

    # @private Why guest (a path) cannot be a mount's guest path, or nil.
    def self.guest_path_problem(guest)
      return "the guest path is empty" if guest.empty?
      return "the guest path is relative; it must be absolute, like /data" unless guest.start_with?("/")
      return "/ would hide the whole guest file system; mount at a directory such as /data" if guest == "/"
      return "the guest path holds a NUL byte or a backslash" if guest.match?(/[\0\\]/)
      return "the guest path is over 1024 bytes" if guest.bytesize > 1024
      clean = File.expand_path(guest, "/")
      return "the guest path is not normalized (it would be #{clean})" if clean != guest

      reserved = RESERVED_GUEST_PATHS.find { nested?(guest, _1) }
      reserved && "the guest path overlaps #{reserved}, which the sandbox reserves (#{reserved == "/tmp" ? "its scratch directory" : "its Ruby"})"
    end

    # @private True when one of two clean absolute paths is the other or
    # lies under it.
    def self.nested?(a, b) = a == b || a.start_with?("#{b}/") || b.start_with?("#{a}/")

    # @private env: as the child and an executor take it ({String =>
    # String}), checked by glovebox.WithEnv's rules.
    def self.env_for(env, _client = nil, setting: "env:")
      return {} if env.nil?
      raise ConfigError, "#{setting} a Hash of NAME => value, not #{env.class}" unless env.is_a?(Hash)

      out = env.each_with_object({}) do |(k, v), h|
        k = k.to_s
        v = v.to_s
        raise ConfigError, "#{setting} a variable has an empty name" if k.empty?
        raise ConfigError, "#{setting} #{k.inspect}: a name cannot hold \"=\" or a NUL byte" if k.match?(/[=\0]/)
        raise ConfigError, "#{setting} #{k}: the value holds a NUL byte" if v.include?("\0")

        h[k] = v
      end
      out
    end

    # True when this sandbox runs on the embedded child (no executor:).
    def embedded? = @client.nil?

    # @private Code mode's request (description, result JSON), answered
    # by the child or by the executor's POST /v1/codemode.
    def code_mode_request(body)
      return @client.request(:post, "/v1/codemode", body) unless embedded?

      embedded_request({ "op" => "codemode", "codemode" => body })
    end

    # @private One request on a channel of the child, and its answer.
    def embedded_request(req) = Child.current.request(req)

    # @private Opens a session in the child: {"id", "idle_timeout_ms"}.
    def embedded_session_open
      child = Child.current
      child.sync_state_key
      config = embedded_config
      child.with_channel do |ch|
        retrying_config(child, config) do
          child.send_request(ch, JSON.generate({ "op" => "session_open", "sid" => child.sid_for(ch, config) }))
          child.read_answer(ch)
        end
      end
    end

    # @private Closes session id in the child; one already gone (or a
    # child restarted since) is closed already.
    def embedded_session_close(id)
      return unless Child.running

      embedded_request({ "op" => "session_close", "id" => id })
    rescue APIError => e
      raise unless e.code == "not_found"
    end

    private

    # The sandbox's config as the child registers it (JSON text): tool
    # names, limits, mounts. Remade only when one of them changed.
    def embedded_config
      shape = [tool_names, @limits, @mounts, @env]
      return @config_json if @config_shape == shape

      lim = {}
      lim["timeout_ms"] = (@limits[:timeout] * 1000).round if @limits[:timeout]
      lim["fuel"] = @limits[:fuel] if @limits[:fuel]
      lim["memory"] = @limits[:memory] if @limits[:memory]
      lim["stdout"] = @limits[:output] if @limits[:output]
      lim["stderr"] = @limits[:stderr] if @limits[:stderr]
      lim["tool_calls"] = @limits[:tool_calls] if @limits[:tool_calls]
      config = { "tools" => shape[0], "limits" => lim }
      config["mounts"] = @mounts unless @mounts.to_a.empty?
      config["env"] = @env unless @env.to_h.empty?
      @config_shape = shape
      @config_json = JSON.generate(config)
    end

    # Runs the block; when the child answers unknown_config (it dropped
    # the config), registers it again and runs the block once more.
    def retrying_config(child, config)
      yield
    rescue APIError => e
      raise unless e.code == "unknown_config"

      child.forget_sid(config)
      yield
    end

    # Sandbox#eval, #continue and Session#eval on the child: the request
    # goes out on a channel this thread holds until the answer; the
    # guest's tool calls come back on it and run here, in this thread.
    def embedded_run(req, stdin, args, key, &on_output)
      child = Child.current
      child.sync_state_key
      q = if (c = req["continue"])
            { "op" => "continue", "from" => c["from"].to_s }.merge(c.slice("approve", "deny", "reply"))
          else
            { "op" => "eval", "code" => req["code"] }
          end
      q["session"] = req["session"] if req["session"]
      q["suspend"] = req["suspend_tools"] if req["suspend_tools"]
      q["key"] = key if key
      q["stdin"] = [stdin.b].pack("m0") if stdin
      q["args"] = args if args
      q["stream"] = true if on_output
      key ||= Keys.local("e-")
      state = CallState.new
      config = q["op"] == "eval" && !q["session"] ? embedded_config : nil
      ev = child.with_channel do |ch|
        retrying_config(child, config) do
          q["sid"] = child.sid_for(ch, config) if config
          child.send_request(ch, JSON.generate(q))
          serve_embedded(child, ch, state, key, &on_output)
        end
      end
      token = ev.delete("state") # a suspended eval's: the key that continues it
      to_result({ "eval" => ev }, state, token || key)
    end

    # Serves the eval's frames on ch until its answer: tool calls (run
    # here, answered on ch), output, then the result or a refusal.
    def serve_embedded(child, ch, state, key, &on_output)
      loop do
        type, body = child.read_frame(ch)
        case type
        when Child::CALL
          id, left, name, args = body.force_encoding(Encoding::UTF_8).split("\n", 4)
          call = { "id" => id, "name" => name, "args" => args }
          us = left.to_i
          call["deadline"] = Process.clock_gettime(Process::CLOCK_MONOTONIC) + (us / 1e6) if us >= 0
          reply = answer(call, state)
          begin
            ch.send_answer(id, reply)
          rescue IOError, SystemCallError
            nil # the child is gone: the next read says how
          end
        when Child::STDOUT then on_output&.call(:stdout, body)
        when Child::STDERR then on_output&.call(:stderr, body)
        when Child::REPLY then return JSON.parse(body.force_encoding(Encoding::UTF_8))
        when Child::REFUSAL then child.refused(body, key: key, record: true)
        else raise ChildError, "broke the embedded protocol: a frame of type #{type.chr.inspect} during an eval"
        end
      end
    end
  end

  class Session
    private

    def embedded? = @sb.embedded?
  end

  class Box
    private

    # Box#run on the child: this host's bubblewrap or gVisor, or E2B's
    # service (its key resolved now, for this run only).
    def embedded_run(cmd, req, &on_output)
      run = { "command" => cmd, "backend" => @requested&.to_s, "credentials" => req["credentials"] }
      if @backend == :e2b
        k = @hosted[:api_key]
        run["e2b"] = { "api_url" => @hosted[:api_url], "api_key" => (k.respond_to?(:call) ? k.call : k).to_s,
                       "template" => @hosted[:template], "envd_url" => @hosted[:envd_url] }.compact
      end
      q = { "op" => "run", "key" => req["idempotency_key"], "run" => run.compact }
      q["stream"] = true if on_output
      child = Child.current
      rec = child.with_channel do |ch|
        child.send_request(ch, JSON.generate(q))
        loop do
          type, body = child.read_frame(ch)
          case type
          when Child::STDOUT then on_output&.call(:stdout, body)
          when Child::STDERR then on_output&.call(:stderr, body)
          when Child::REPLY then break JSON.parse(body.force_encoding(Encoding::UTF_8))
          when Child::REFUSAL then child.refused(body, key: req["idempotency_key"])
          else raise ChildError, "broke the embedded protocol: a frame of type #{type.chr.inspect} during a run"
          end
        end
      end
      to_result(rec, false)
    end
  end
end
