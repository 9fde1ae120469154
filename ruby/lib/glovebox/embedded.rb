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

    # @private mounts: as the child takes them: each {host:, guest:,
    # writable: false, description: nil} (Symbol or String keys). An
    # executor's mounts are its operator's: remote mode refuses them.
    def self.mounts_for(mounts, client)
      list = Array(mounts).map do |m|
        h = m.to_h.transform_keys(&:to_sym)
        bad = h.keys - %i[host guest writable description]
        raise ConfigError, "mounts: unknown key(s) #{bad.join(", ")}; a mount is {host:, guest:, writable:, description:}" unless bad.empty?
        raise ConfigError, "mounts: each needs host: (a directory here) and guest: (its path in the sandbox)" unless h[:host] && h[:guest]

        { "host" => File.expand_path(h[:host].to_s), "guest" => h[:guest].to_s, "writable" => h[:writable] ? true : nil,
          "description" => h[:description]&.to_s }.compact
      end
      raise ConfigError, "mounts: an executor's mounts are its operator's (not sent from here); run embedded for local mounts" if client && !list.empty?

      list
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
      shape = [tool_names, @limits, @mounts]
      return @config_json if @config_shape == shape

      lim = {}
      lim["timeout_ms"] = (@limits[:timeout] * 1000).round if @limits[:timeout]
      lim["fuel"] = @limits[:fuel] if @limits[:fuel]
      lim["memory"] = @limits[:memory] if @limits[:memory]
      lim["stdout"] = @limits[:output] if @limits[:output]
      lim["tool_calls"] = @limits[:tool_calls] if @limits[:tool_calls]
      config = { "tools" => shape[0], "limits" => lim }
      config["mounts"] = @mounts unless @mounts.to_a.empty?
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
