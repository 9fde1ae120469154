# frozen_string_literal: true

module Glovebox
  # What a run did (a record in state "completed"): +exit_status+
  # Integer (128+N for a signal; 137 when canceled or killed), +stdout+
  # and +stderr+ binary Strings, +timed_out+, +killed_for_memory+,
  # +canceled+, +stdout_truncated+, +stderr_truncated+ booleans,
  # +duration+ seconds, +isolation+ ("namespaces", "gvisor", ...),
  # +outputs+ Hash of path => binary String (files left in ./outputs),
  # +outputs_truncated+ true when files of ./outputs were left out (over
  # the output_files or size limits, or not regular files: links, FIFOs),
  # +key+ the idempotency key, +attached+ true when this answer came from
  # an earlier request under the key (a retry), +backend+ the executor's.
  RunResult = Struct.new(:key, :exit_status, :stdout, :stderr, :timed_out, :killed_for_memory, :canceled,
                         :stdout_truncated, :stderr_truncated, :duration, :isolation, :outputs, :outputs_truncated, :attached,
                         :backend, :record, keyword_init: true) do
    def success? = exit_status.zero? && !timed_out
  end

  # Runs commands in an OS sandbox, the way hermetic runs them. Embedded
  # (no executor:), on this host's bubblewrap or gVisor through the
  # glovebox child (trust "host": Box#off_host? is false); with
  # executor:, through the executor's, off the app host (trust "remote",
  # off_host? true), with idempotency keys and in-doubt errors.
  #
  #   box = Glovebox::Box.new                  # embedded: bwrap or gVisor here
  #   r = box.run(["python3", "-c", "print(2+2)"])
  #   r.stdout #=> "4\n"
  class Box
    attr_reader :client

    # executor:/token:/ca_file: or client: as for Sandbox (none, and no
    # Glovebox.executor: embedded). backend: embedded only, "bwrap",
    # "gvisor" or nil (the first of them this host has; a run raises
    # APIError "unavailable" naming what is missing when it has neither).
    def initialize(executor: nil, token: nil, ca_file: nil, client: nil, backend: nil)
      @client = Sandbox.client_for(executor, token, ca_file, client)
      raise ConfigError, "backend: chooses this host's sandbox; an executor has its own" if @client && backend

      @backend = backend&.to_s
    end

    # "remote" through an executor (the command runs on its host);
    # "host" embedded (on this host, next to the app's secrets).
    def trust = @client ? "remote" : "host"

    # True through an executor.
    def off_host? = !@client.nil?

    # Always true (hermetic's and Silas's run/enabled? duck type).
    def enabled? = true

    # The backend and isolation: the executor's {"backend", "isolation",
    # ...}, or embedded this host's {"backend", "isolation", "trust"} (or
    # {"error"} saying why there is none). Embedded, it starts the child.
    def info = @client ? @client.info : Child.current.info["box"]

    # Runs argv (an Array of String) or, with shell:, a /bin/sh -c
    # string. files: {"name" => String} put in the working directory;
    # stdin: String; env: {"NAME" => String}; credentials: like env, each
    # value a String or a callable resolved now (at call time), never
    # logged, stored or hashed by the executor (not part of the request a
    # key names); network: Array of host
    # names reachable through its egress proxy (empty: no network);
    # timeout: seconds; limits: {memory:, cpus:, pids:, output:, disk:,
    # output_files:} (bytes, cores, count); key: an idempotency key
    # (1-128 of A-Z a-z 0-9 . _ : -; default a fresh random one, so every
    # call without one runs); expires_at: a Time after which it should not
    # start. on_output: ->(stream, bytes) with stream :stdout or :stderr,
    # called as the command writes.
    #
    # Returns a RunResult (any exit status, a timeout included). Raises
    # RunError for a run that did not complete (state "failed", "lost":
    # the executor stopped while it ran and will not run it again under
    # this key, "expired"); InDoubtError when the connection broke after
    # the request was sent (retry with #retry or key: err.key);
    # ConnectionError when nothing was sent; APIError for a refusal
    # (request_too_large, invalid_command, key_conflict, queue_full, ...).
    #
    # Embedded, the run is on this host and keeps no record: a key names
    # it for #cancel only (the same key again runs again), nothing is in
    # doubt (the child dying mid-run raises ChildError), and a host
    # without bubblewrap or gVisor raises APIError "unavailable" saying
    # so.
    def run(argv = nil, shell: nil, files: {}, stdin: nil, env: {}, credentials: nil, network: [],
            timeout: nil, limits: {}, key: nil, expires_at: nil, &on_output)
      key ||= Keys.fresh("r-")
      cmd = { "network" => {}, "limits" => {} }
      cmd["argv"] = Array(argv).map(&:to_s) if argv
      cmd["shell"] = shell if shell
      cmd["files"] = files.to_h { |k, v| [k.to_s, [v.to_s.b].pack("m0")] } unless files.empty?
      cmd["stdin"] = [stdin.b].pack("m0") if stdin
      cmd["env"] = env.to_h { |k, v| [k.to_s, v.to_s] } unless env.empty?
      cmd["network"]["allow"] = network.map(&:to_s) unless network.empty?
      cmd["timeout_ms"] = (timeout * 1000).round if timeout
      limits.each { |k, v| cmd["limits"][k.to_s] = v }
      req = { "idempotency_key" => key, "command" => cmd }
      req["credentials"] = credentials.to_h { |k, v| [k.to_s, (v.respond_to?(:call) ? v.call : v).to_s] } if credentials
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
    # Embedded runs keep no records: ConfigError.
    def lookup(key)
      raise ConfigError, "embedded runs keep no records: lookup needs an executor" unless @client

      to_result(@client.request(:get, "/v1/runs/#{key}"), true)
    end

    # Cancels the run under key (DELETE): a queued run ends "failed"
    # ("canceled"), a running one is killed (RunResult#canceled).
    # Embedded, a running one is killed (its run returns with canceled
    # set) and this returns nil; APIError "not_found" when none runs.
    def cancel(key)
      return to_result(@client.request(:delete, "/v1/runs/#{key}"), true) if @client

      (Child.running || raise(APIError.new("not_found", "nothing runs under key #{key}", from: "glovebox")))
        .control({ "op" => "cancel", "key" => key })
      nil
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
                    attached: attached, backend: record["backend"], record: record)
    end
  end
end
