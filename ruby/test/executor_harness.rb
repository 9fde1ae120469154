# frozen_string_literal: true

# Starts a real `glovebox executor` on loopback for the tests: a
# temporary directory with a devcert, a tenant token (its SHA-256 in the
# config), a store; stopped at exit. The binary is $GLOVEBOX_BIN, else
# built with `go build ./cmd/glovebox` from the repository root.
require "digest"
require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"
require "net/http"
require "glovebox"

module ExecutorHarness
  ROOT = File.expand_path("../..", __dir__)

  class Executor
    attr_reader :url, :token, :ca_file, :dir, :pid, :store

    # state_key: true starts it with --state-key (a fresh key file in
    # dir): sessions and paused evals are then kept in its store.
    def initialize(bin, dir, config_extra: "", state_key: false)
      @bin = bin
      @dir = dir
      @state_args = []
      if state_key
        File.write(File.join(dir, "state.key"), SecureRandom.hex(32))
        File.chmod(0o600, File.join(dir, "state.key"))
        @state_args = ["--state-key", File.join(dir, "state.key")]
      end
      @token = "gbx_#{[SecureRandom.bytes(32)].pack("m0").tr("+/", "-_").delete("=")}"
      system(@bin, "executor", "devcert", "--out", File.join(dir, "tls"), out: File::NULL, err: File::NULL) ||
        raise("glovebox executor devcert failed")
      @ca_file = File.join(dir, "tls", "cert.pem")
      File.write(File.join(dir, "executor.yaml"), <<~YAML)
        tenants:
          - name: app
            token_sha256: #{Digest::SHA256.hexdigest(@token)}
            max_request_bytes: 65536
        #{config_extra}
      YAML
      @store = File.join(dir, "exec.db")
      start
    end

    def start
      # The same port across restarts, as a real executor's address.
      port = @port ||= TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
      @url = "https://127.0.0.1:#{port}"
      @log = File.join(@dir, "executor.log")
      @pid = Process.spawn(@bin, "executor", "--config", File.join(@dir, "executor.yaml"), "--store", @store,
                           "--backend", "bwrap", "--evals", "--tls-cert", File.join(@dir, "tls", "cert.pem"),
                           "--tls-key", File.join(@dir, "tls", "key.pem"), "--listen", "127.0.0.1:#{port}",
                           *@state_args, out: [@log, "a"], err: [@log, "a"], pgroup: true)
      wait_healthy
    end

    def wait_healthy
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 120
      loop do
        begin
          h = Net::HTTP.new("127.0.0.1", URI(@url).port)
          h.use_ssl = true
          h.ca_file = @ca_file
          return if h.get("/healthz").code == "200"
        rescue StandardError
          nil
        end
        raise "executor exited: #{File.read(@log)[-2000..]}" if Process.waitpid(@pid, Process::WNOHANG)
        raise "executor did not become healthy: #{File.read(@log)[-2000..]}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.05
      end
    end

    # SIGKILL: the process dies without draining (its runs go lost).
    def kill9
      Process.kill("KILL", @pid)
      Process.wait(@pid)
    end

    def stop
      return unless @pid

      Process.kill("TERM", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      @pid = nil
    end

    def client(token: @token) = Glovebox::Client.new(url: @url, token: token, ca_file: @ca_file)
  end

  def self.bin
    @bin ||= ENV["GLOVEBOX_BIN"].to_s.empty? ? build : ENV["GLOVEBOX_BIN"]
  end

  def self.build
    out = File.join(Dir.mktmpdir("glovebox-bin"), "glovebox")
    system("go", "build", "-o", out, "./cmd/glovebox", chdir: ROOT) || raise("go build ./cmd/glovebox failed")
    out
  end

  # The shared executor of a test run.
  def self.executor = @executor ||= shared("glovebox-exec")

  # A second shared executor, started with --state-key (sessions stored,
  # evals may pause); its own directory and store.
  def self.state_executor = @state_executor ||= shared("glovebox-exec-state", state_key: true)

  # An executor in a fresh directory, stopped (and its directory removed)
  # after the run.
  def self.shared(prefix, **opts)
    dir = Dir.mktmpdir(prefix)
    ex = Executor.new(bin, dir, **opts)
    cleanup = lambda do
      ex.stop
      FileUtils.rm_rf(dir)
    end
    defined?(Minitest.after_run) ? Minitest.after_run(&cleanup) : at_exit(&cleanup)
    ex
  end

  def executor = ExecutorHarness.executor

  def state_executor = ExecutorHarness.state_executor

  def sandbox(tools = nil, **opts)
    Glovebox::Sandbox.new(tools: tools, client: executor.client, **opts)
  end
end
