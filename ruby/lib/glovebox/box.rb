# frozen_string_literal: true

module Glovebox
  # What a run did (a record in state "completed"): +exit_status+
  # Integer (128+N for a signal; 137 when canceled or killed), +stdout+
  # and +stderr+ binary Strings, +timed_out+, +killed_for_memory+,
  # +canceled+, +stdout_truncated+, +stderr_truncated+ booleans,
  # +duration+ seconds, +isolation+ ("namespaces", "gvisor", ...),
  # +outputs+ Hash of path => binary String (files left in ./outputs),
  # +key+ the idempotency key, +attached+ true when this answer came from
  # an earlier request under the key (a retry), +backend+ the executor's.
  RunResult = Struct.new(:key, :exit_status, :stdout, :stderr, :timed_out, :killed_for_memory, :canceled,
                         :stdout_truncated, :stderr_truncated, :duration, :isolation, :outputs, :attached,
                         :backend, :record, keyword_init: true) do
    def success? = exit_status.zero? && !timed_out
  end

  # Runs commands through the executor's OS sandbox (bubblewrap or gVisor
  # on the executor's host), the way hermetic runs them: off the app
  # host (Box#off_host? is true, trust "remote"), with idempotency keys
  # and in-doubt errors.
  #
  #   box = Glovebox::Box.new(executor: url, token: tok, ca_file: "tls/cert.pem")
  #   r = box.run(["python3", "-c", "print(2+2)"])
  #   r.stdout #=> "4\n"
  class Box
    attr_reader :client

    # executor:/token:/ca_file: or client: as for Sandbox.
    def initialize(executor: nil, token: nil, ca_file: nil, client: nil)
      @client = client || Client.new(url: executor || raise(ConfigError, "executor: (URL) or client: is required"),
                                     token: token, ca_file: ca_file)
    end

    # Always "remote": the command runs on the executor's host.
    def trust = "remote"

    # Always true.
    def off_host? = true

    # Always true (hermetic's and Silas's run/enabled? duck type).
    def enabled? = true

    # The executor's backend and isolation: {"backend", "isolation", ...}.
    def info = @client.info

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
    def run(argv = nil, shell: nil, files: {}, stdin: nil, env: {}, credentials: nil, network: [],
            timeout: nil, limits: {}, key: nil, expires_at: nil, &on_output)
      key ||= Client::Keys.fresh("r-")
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
    def lookup(key) = to_result(@client.request(:get, "/v1/runs/#{key}"), true)

    # Cancels the run under key (DELETE): a queued run ends "failed"
    # ("canceled"), a running one is killed (RunResult#canceled).
    def cancel(key) = to_result(@client.request(:delete, "/v1/runs/#{key}"), true)

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
                    attached: attached, backend: record["backend"], record: record)
    end
  end
end
