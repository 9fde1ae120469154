# frozen_string_literal: true

# Test helpers for apps that use glovebox. Required explicitly (it is not
# loaded by `require "glovebox"`):
#
#   require "glovebox/testing"
#
#   class OrdersToolTest < Minitest::Test
#     include Glovebox::Testing::Minitest
#
#     def test_total
#       r = glovebox_eval('orders.sum { _1["total"] }', tools: Shop.new)
#       assert_glovebox_ok r, 42.5
#       assert_glovebox_tool_called r, :orders
#     end
#   end
#
#   RSpec.configure { |c| c.include Glovebox::Testing::RSpec }
#   expect(glovebox_eval("1 + 1")).to be_glovebox_ok(2)
#
# The helpers make sandboxes the way the app does (Glovebox::Sandbox.new,
# the gem's default mode) with Glovebox::Testing.sandbox_options merged
# in; Glovebox::Testing.local_executor starts a real executor for
# remote-mode tests.
require "glovebox"
require "digest"
require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"

module Glovebox
  module Testing
    class << self
      # Options (a Hash) every sandbox the helpers make is given, before
      # the test's own: e.g. { client: Glovebox::Testing.local_executor.client }
      # runs them on a local executor, { timeout: 2 } shortens every eval.
      # Empty by default.
      attr_writer :sandbox_options

      def sandbox_options = @sandbox_options ||= {}

      # A LocalExecutor started with opts (LocalExecutor.new's), one per
      # distinct opts in the process, stopped and its directory removed
      # when the test run ends (Minitest.after_run when Minitest is loaded,
      # else at_exit).
      def local_executor(**opts)
        @executors ||= {}
        @executors[opts] ||= begin
          ex = LocalExecutor.new(**opts)
          cleanup = -> { ex.close }
          defined?(::Minitest.after_run) ? ::Minitest.after_run(&cleanup) : at_exit(&cleanup)
          ex
        end
      end

      # A readable account of result for a failure message: its status,
      # the guest's error (class, message, backtrace), stdout, stderr, and
      # the tool calls it made.
      def describe(result)
        return "not a Glovebox::Result: #{result.inspect}" unless result.respond_to?(:status)

        s = +"status #{result.status}"
        s << ", value #{result.value.inspect}" if result.status.to_s == "ok"
        if (e = result.error)
          s << "\n  #{e.class_name}: #{e.message}"
          Array(e.backtrace).first(10).each { |l| s << "\n    #{l}" }
        end
        s << "\n  stdout: #{result.stdout.inspect}" unless result.stdout.to_s.empty?
        s << "\n  stderr: #{result.stderr.inspect}" unless result.stderr.to_s.empty?
        calls = Array(result.tool_calls).map { |c| "#{c.name}(#{c.args.map(&:inspect).join(", ")}) #{c.outcome}" }
        s << "\n  tool calls: #{calls.join("; ")}" unless calls.empty?
        s
      end

      # The tool calls of result named name, whose positional arguments
      # are args when args is not empty.
      def calls(result, name, args)
        Array(result.tool_calls).select { |c| c.name.to_s == name.to_s && (args.empty? || c.args == args) }
      end
    end

    # What both test frameworks' helpers share: making sandboxes.
    module Helpers
      # A Glovebox::Sandbox exposing tools (an object, or nil), with
      # Testing.sandbox_options and then opts (Sandbox.new's).
      def glovebox_sandbox(tools = nil, **opts)
        Glovebox::Sandbox.new(tools: tools, **Testing.sandbox_options, **opts)
      end

      # Runs code in a new glovebox_sandbox(tools, **opts) and returns the
      # Glovebox::Result.
      def glovebox_eval(code, tools: nil, **opts) = glovebox_sandbox(tools, **opts).eval(code)
    end

    # Minitest helpers: include Glovebox::Testing::Minitest in a test class.
    module Minitest
      include Helpers

      # Asserts result ended "ok" and, when expected is given, that its
      # value == expected. The failure message shows the guest's error and
      # output (Testing.describe).
      def assert_glovebox_ok(result, *expected, msg: nil)
        ok = result.respond_to?(:status) && result.status.to_s == "ok"
        assert ok, -> { [msg, "expected glovebox status ok, got #{Testing.describe(result)}"].compact.join("\n") }
        return result if expected.empty?

        assert expected.first == result.value,
               -> { [msg, "expected glovebox value #{expected.first.inspect}, got #{Testing.describe(result)}"].compact.join("\n") }
        result
      end

      # Asserts result's status is status (a String or Symbol: "timeout",
      # :error, ...).
      def assert_glovebox_status(status, result, msg = nil)
        assert result.respond_to?(:status) && result.status.to_s == status.to_s,
               -> { [msg, "expected glovebox status #{status}, got #{Testing.describe(result)}"].compact.join("\n") }
        result
      end

      # Asserts the guest called the tool name (with positional args,
      # when given) during result's eval. Returns the matching calls.
      def assert_glovebox_tool_called(result, name, *args)
        found = Testing.calls(result, name, args)
        want = args.empty? ? name.to_s : "#{name}(#{args.map(&:inspect).join(", ")})"
        assert !found.empty?, -> { "expected a call of #{want}, got #{Testing.describe(result)}" }
        found
      end

      # Asserts the guest never called the tool name.
      def refute_glovebox_tool_called(result, name)
        assert Testing.calls(result, name, []).empty?, -> { "expected no call of #{name}, got #{Testing.describe(result)}" }
      end
    end

    # RSpec helpers and matchers: RSpec.configure { |c| c.include
    # Glovebox::Testing::RSpec }. The matchers are plain objects (RSpec
    # takes any object with matches?), so this file needs no RSpec to load.
    module RSpec
      include Helpers

      # A matcher of one Result; Testing.describe explains a miss.
      class ResultMatcher
        def initialize(what, &test)
          @what = what
          @test = test
        end

        def matches?(result)
          @result = result
          @test.call(result)
        end

        def failure_message = "expected #{@what}, got #{Testing.describe(@result)}"

        def failure_message_when_negated = "expected not #{@what}, got #{Testing.describe(@result)}"

        def description = @what
      end

      # expect(result).to be_glovebox_ok, or be_glovebox_ok(value).
      def be_glovebox_ok(*expected)
        what = expected.empty? ? "glovebox status ok" : "glovebox status ok with value #{expected.first.inspect}"
        ResultMatcher.new(what) do |r|
          r.respond_to?(:status) && r.status.to_s == "ok" && (expected.empty? || r.value == expected.first)
        end
      end

      # expect(result).to have_glovebox_status(:timeout)
      def have_glovebox_status(status)
        ResultMatcher.new("glovebox status #{status}") { |r| r.respond_to?(:status) && r.status.to_s == status.to_s }
      end

      # expect(result).to have_called_tool(:orders), or with positional
      # arguments: have_called_tool(:order, 7).
      def have_called_tool(name, *args)
        want = args.empty? ? name.to_s : "#{name}(#{args.map(&:inspect).join(", ")})"
        ResultMatcher.new("a call of #{want}") { |r| r.respond_to?(:tool_calls) && !Testing.calls(r, name, args).empty? }
      end
    end

    # A real `glovebox executor` on loopback, for tests of remote mode
    # (Glovebox::Sandbox with executor:/client:, Glovebox::Box): a
    # directory with a development certificate (`glovebox executor
    # devcert`), a random tenant token whose SHA-256 is in its YAML
    # config, an SQLite store, and a free port. Started by new; stop (or
    # close, which also removes a directory it made) ends it. Its output
    # goes to log_path.
    class LocalExecutor
      # url: "https://127.0.0.1:PORT"; token: the tenant "app"'s bearer
      # token; ca_file: the certificate to trust; dir: its directory;
      # pid: the process (nil when stopped); store: the SQLite file;
      # log_path: its stdout and stderr.
      attr_reader :url, :token, :ca_file, :dir, :pid, :store, :log_path

      # bin: the glovebox binary (Glovebox::Native.binary); dir: where its
      # files go (a new temporary directory, removed by close, when nil);
      # config_extra: YAML appended to the config (EXECUTOR.md); state_key:
      # true starts it with --state-key (a fresh key in dir), so sessions
      # and paused evals are kept in its store; backend: where commands run
      # ("bwrap" or "gvisor"); ready_timeout: seconds to wait for /healthz
      # (a first start on a machine compiles the Ruby image: minutes).
      # Raises RuntimeError with the log's tail when it does not start.
      def initialize(bin: nil, dir: nil, config_extra: "", state_key: false, backend: "bwrap", ready_timeout: 300)
        @bin = bin || Native.binary
        @own_dir = dir.nil?
        @dir = dir || Dir.mktmpdir("glovebox-executor")
        @backend = backend
        @ready_timeout = ready_timeout
        @state_args = []
        if state_key
          key = File.join(@dir, "state.key")
          File.write(key, SecureRandom.hex(32))
          File.chmod(0o600, key)
          @state_args = ["--state-key", key]
        end
        @token = "gbx_#{[SecureRandom.bytes(32)].pack("m0").tr("+/", "-_").delete("=")}"
        system(@bin, "executor", "devcert", "--out", File.join(@dir, "tls"), out: File::NULL, err: File::NULL) ||
          raise("glovebox executor devcert failed (#{@bin})")
        @ca_file = File.join(@dir, "tls", "cert.pem")
        File.write(File.join(@dir, "executor.yaml"), <<~YAML)
          tenants:
            - name: app
              token_sha256: #{Digest::SHA256.hexdigest(@token)}
              max_request_bytes: 65536
          #{config_extra}
        YAML
        @store = File.join(@dir, "exec.db")
        @log_path = File.join(@dir, "executor.log")
        start
      end

      # Starts the process (again, after stop or kill9: same port, same
      # store) and waits until it is healthy.
      def start
        port = @port ||= TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
        @url = "https://127.0.0.1:#{port}"
        tls = File.join(@dir, "tls")
        @pid = Process.spawn(@bin, "executor", "--config", File.join(@dir, "executor.yaml"), "--store", @store,
                             "--backend", @backend, "--evals", "--tls-cert", File.join(tls, "cert.pem"),
                             "--tls-key", File.join(tls, "key.pem"), "--listen", "127.0.0.1:#{port}",
                             *@state_args, out: [@log_path, "a"], err: [@log_path, "a"], pgroup: true)
        wait_healthy
        self
      end

      # SIGTERM, then waits for the process to exit (it drains running
      # work first). Idempotent.
      def stop
        return unless @pid

        Process.kill("TERM", @pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
      end

      # SIGKILL: the process dies without draining (its runs go lost).
      def kill9
        Process.kill("KILL", @pid)
        Process.wait(@pid)
        @pid = nil
      end

      # stop, then remove dir if this executor made it.
      def close
        stop
        FileUtils.rm_rf(@dir) if @own_dir
      end

      # A Glovebox::Client for the tenant (token: another to test refusals).
      def client(token: @token) = Glovebox::Client.new(url: @url, token: token, ca_file: @ca_file)

      # A Glovebox::Sandbox on this executor exposing tools.
      def sandbox(tools = nil, **opts) = Glovebox::Sandbox.new(tools: tools, client: client, **opts)

      # The last bytes of the process's output.
      def log_tail(bytes = 2000)
        File.exist?(@log_path) ? File.read(@log_path)[-bytes..] || File.read(@log_path) : ""
      end

      private

      def wait_healthy
        require "net/http"
        require "openssl"
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @ready_timeout
        loop do
          begin
            h = Net::HTTP.new("127.0.0.1", @port)
            h.use_ssl = true
            h.ca_file = @ca_file
            return if h.get("/healthz").code == "200"
          rescue StandardError
            nil
          end
          raise "glovebox executor exited: #{log_tail}" if Process.waitpid(@pid, Process::WNOHANG)
          if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
            raise "glovebox executor did not become healthy in #{@ready_timeout}s: #{log_tail}"
          end

          sleep 0.05
        end
      end
    end
  end
end
