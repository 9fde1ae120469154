# frozen_string_literal: true

require_relative "helper"
require_relative "local_http"
require "json"

# hermetic's spelling of Glovebox::Box (seed 004): a String runs via
# /bin/sh -c, an Array execs directly, network: :none, "512m" limits,
# timed_out?, trust and off_host? on box and result, the constructors,
# lazy credentials, the null box; on this host's bubblewrap and gVisor
# (the real backends), an executor, and E2B's API (a local stand-in).
class HermeticTest < Minitest::Test
  include ExecutorHarness

  def test_string_runs_via_sh_and_array_execs_directly
    box = Glovebox::Box.new
    r = box.run("echo $((6*7)) | tr 4 x")
    assert_equal "x2\n", r.stdout
    assert r.success?
    r = box.run(["echo", "$HOME; echo injected"])
    assert_equal "$HOME; echo injected\n", r.stdout
    r = box.run("python3 -c 'print(2+2)'")
    assert_equal ["4\n", 0], [r.stdout, r.exit_status]
    r = box.run("exit 3")
    refute r.success?
    assert_equal 3, r.exit_status
    assert_equal 127, box.run(["no-such-command"]).exit_status
    e = assert_raises(Glovebox::ConfigError) { box.run("true", shell: "true") }
    assert_match(/not both/, e.message)
    assert_raises(Glovebox::ConfigError) { box.run([]) }
    assert_raises(Glovebox::ConfigError) { box.run(42) }
  end

  # A command that cannot run says why on stderr, on each backend: the
  # trial's `box.run(...)` exiting 127 with nothing said.
  def test_exec_failure_says_why
    backends = [Glovebox::Box.bwrap, Glovebox::Box.gvisor].select do |b|
      b.run("true")
    rescue Glovebox::APIError
      false
    end
    skip "neither bubblewrap nor gVisor runs here" if backends.empty?
    backends.each do |box|
      assert_equal ["hi\n", 0], box.run("echo hi").then { [_1.stdout, _1.exit_status] }
      r = box.run(["no-such-command"])
      assert_equal [127, "glovebox: no-such-command: command not found\n"], [r.exit_status, r.stderr], box.inspect
      r = box.run(["/etc/passwd"])
      assert_equal [126, "glovebox: /etc/passwd: cannot execute: permission denied\n"], [r.exit_status, r.stderr], box.inspect
      r = box.run("no-such-command")
      assert_equal 127, r.exit_status
      assert_match(/no-such-command: not found/, r.stderr)
    end
  end

  # hermetic's README example, as written there (the require and class
  # name changed; no E2B here, so this host's box).
  def test_the_seed_example
    box = Glovebox::Box.new
    result = box.run("python3 -c 'print(2+2)'",
                     files: { "data.txt" => "..." },
                     stdin: nil,
                     env: { "MODE" => "batch" },
                     network: :none,
                     timeout: 10,
                     limits: { memory: "512m", cpus: "1", pids: 256 })
    assert_equal "4\n", result.stdout
    assert result.success?
    refute result.timed_out?
    assert_equal :host, result.trust
    assert_raises(RuntimeError) { raise "untrusted code requires an off-host sandbox" unless box.off_host? }
  end

  def test_files_stdin_and_default_deny_env
    ENV["GLOVEBOX_TEST_APP_SECRET"] = "app-secret"
    r = Glovebox::Box.new.run(%(cat data.txt; cat; echo "$MODE"; echo "${GLOVEBOX_TEST_APP_SECRET-unset}"),
                              files: { "data.txt" => "rows\n" }, stdin: "piped\n", env: { "MODE" => "batch" })
    assert_equal "rows\npiped\nbatch\nunset\n", r.stdout
  ensure
    ENV.delete("GLOVEBOX_TEST_APP_SECRET")
  end

  def test_timeout_is_124_and_timed_out
    r = Glovebox::Box.new.run(["sleep", "5"], timeout: 1)
    assert r.timed_out?
    assert_equal 124, r.exit_status
    refute r.success?
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.new.run("true", timeout: "1") }
  end

  def test_network_none_and_allowlist
    box = Glovebox::Box.new
    r = box.run("getent hosts example.com || echo no-dns; echo \"proxy=${HTTPS_PROXY-none}\"", network: :none)
    assert_equal "no-dns\nproxy=none\n", r.stdout
    r = box.run("echo \"proxy=${HTTPS_PROXY-none}\"", network: ["api.example.com"])
    assert_match(%r{proxy=http://127\.0\.0\.1:\d+}, r.stdout)
    assert_equal({ "allow" => ["api.example.com"] }, Glovebox::Box.network_for(allow: ["api.example.com"]))
    e = assert_raises(Glovebox::ConfigError) { box.run("true", network: :all) }
    assert_match(/\Anetwork: :all/, e.message)
    assert_raises(Glovebox::ConfigError) { box.run("true", network: ["https://x.example"]) }
  end

  def test_limits_as_hermetic_writes_them
    assert_equal({ "memory" => 512 << 20, "cpus" => 1.0, "pids" => 256 },
                 Glovebox::Box.limits_for({ memory: "512m", cpus: "1", pids: 256 }))
    assert_equal({ "memory" => 1 << 30, "disk" => 64 << 10, "output" => 1000, "pids" => 64, "cpus" => 0.5 },
                 Glovebox::Box.limits_for({ memory: "1G", disk: "64KiB", output: 1000, pids: "64", cpus: 0.5 }))
    assert_equal((1.5 * (1 << 30)).to_i, Glovebox::Box.limits_for({ memory: "1.5g" })["memory"])
    { { memory: "512x" } => /\Alimits: memory: "512x" is not a size/,
      { memory: -1 } => /limits: memory: -1/,
      { pids: "many" } => /\Alimits: pids: "many" is not a positive whole number/,
      { cpus: "one" } => /\Alimits: cpus: "one" is not a number of cores/,
      { swap: "1g" } => /\Alimits: unknown key :swap/ }.each do |lim, msg|
      e = assert_raises(Glovebox::ConfigError) { Glovebox::Box.new.run("true", limits: lim) }
      assert_match msg, e.message
    end
    # The memory limit holds: a 300 MiB allocation under "64m" does not succeed.
    r = Glovebox::Box.new.run(["python3", "-c", "b = bytearray(300 << 20); print('allocated')"], limits: { memory: "64m" })
    refute r.success?
    refute_match(/allocated/, r.stdout)
  end

  def test_both_local_backends_and_their_posture
    %i[bwrap gvisor].each do |name|
      box = Glovebox::Box.public_send(name)
      assert_equal [name, :host, false, true], [box.backend, box.trust, box.off_host?, box.enabled?]
      r = box.run("echo $((6*7))", limits: { memory: "256m", pids: 64 })
      assert_equal "42\n", r.stdout, "#{name}: #{r.stderr}"
      assert_equal({ bwrap: "namespaces", gvisor: "gvisor" }[name], r.isolation)
      assert_equal :host, r.trust
      refute r.off_host?
      assert_equal name.to_s, r.backend
    end
    assert_equal :gvisor, Glovebox::Box.new(backend: "gvisor").backend
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Box.new(backend: :docker) }
    assert_match(/\Abackend: :docker is not one of :bwrap, :gvisor, :remote, :e2b, :null/, e.message)
    e = assert_raises(Glovebox::ConfigError) { Glovebox::Box.gvisor(image: "ruby:3.3-slim") }
    assert_match(/\Aimage: "ruby:3.3-slim"/, e.message)
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.docker(image: "ruby:3.3-slim") }
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.firecracker(kernel: "k", rootfs: "r") }
  end

  def test_null_box_fails_loud
    box = Glovebox::Box.null
    assert_equal [:null, :none, false, false], [box.backend, box.trust, box.off_host?, box.enabled?]
    e = assert_raises(Glovebox::DisabledError) { box.run("echo hi") }
    assert_match(/null box/, e.message)
    assert_equal "none", box.info["trust"]
  end

  # Silas's config.sandbox takes any object with run and enabled?.
  def test_silas_duck_type
    [Glovebox::Box.new, Glovebox::Box.null, Glovebox::Box.wrap(client: executor.client)].each do |b|
      assert b.respond_to?(:run) && b.respond_to?(:enabled?)
    end
    r = Glovebox::Box.new.run("printf out; printf err >&2; exit 2")
    assert_equal ["out", "err", 2, false], [r.stdout, r.stderr, r.exit_status, r.success?]
  end

  def test_remote_through_an_executor
    box = Glovebox::Box.wrap(client: executor.client)
    assert_equal [:remote, :remote, true], [box.backend, box.trust, box.off_host?]
    r = box.run("echo $((6*7)) | tr 4 x", network: :none, limits: { memory: "256m", pids: 64 }, timeout: 20)
    assert_equal "x2\n", r.stdout
    assert_equal :remote, r.trust
    assert r.off_host?
    r = box.run(["sleep", "5"], timeout: 0.5)
    assert_equal [true, 124], [r.timed_out?, r.exit_status]
    # Any local constructor with an executor becomes its client.
    assert_equal :remote, Glovebox::Box.gvisor(client: executor.client).trust
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.new(backend: :remote) }
  end

  # Credentials given to the box are callables resolved at each run,
  # never kept: each run asks again, and nothing of the value is in the
  # record (or the key: the same key with another value is the same run).
  def test_lazy_credentials_resolved_per_run
    asked = 0
    box = Glovebox::Box.new(credentials: { "API_TOKEN" => -> { asked += 1; "tok-#{asked}" } })
    assert_equal 0, asked
    assert_equal "tok-1\n", box.run("echo $API_TOKEN").stdout
    assert_equal "tok-2\n", box.run("echo $API_TOKEN").stdout
    refute_includes box.instance_variables.map { box.instance_variable_get(_1).inspect }.join, "tok-"
    remote = Glovebox::Box.wrap(client: executor.client, credentials: { "API_TOKEN" => -> { asked += 1; "tok-#{asked}" } })
    key = "cred-#{SecureRandom.hex(6)}"
    a = remote.run("printf %s \"$API_TOKEN\" | wc -c", key: key)
    b = remote.run("printf %s \"$API_TOKEN\" | wc -c", key: key)
    assert b.attached
    assert_equal a.stdout, b.stdout
    refute_match(/tok-/, JSON.generate(a.record))
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.new(credentials: { "X" => 42 }) }
  end

  def test_hosted_e2b
    fake = FakeE2B.new
    box = Glovebox::Box.hosted(:e2b, api_key: -> { "e2b-key-1" }, api_url: fake.url, envd_url: fake.url)
    assert_equal [:e2b, :vendor, true], [box.backend, box.trust, box.off_host?]
    seen = []
    r = box.run("python -c 'print(2+2)'", files: { "data.txt" => "..." }, env: { "MODE" => "batch" }) { |s, b| seen << [s, b] }
    assert_equal "ran /bin/sh -c python -c 'print(2+2)' MODE=batch\n", r.stdout
    assert_equal [0, :vendor, "vendor_vm", true], [r.exit_status, r.trust, r.isolation, r.off_host?]
    assert_equal [[:stdout, r.stdout]], seen
    assert_equal ["e2b-key-1"], fake.keys.uniq
    assert_equal({ "/home/user/data.txt" => "..." }, fake.files)
    assert_equal ["created", "deleted"], fake.lifecycle
    refute_match(/e2b-key/, JSON.generate(r.record))
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.hosted(:e2b) }
    assert_raises(Glovebox::ConfigError) { Glovebox::Box.hosted(:daytona, api_key: "k") }
    e = assert_raises(Glovebox::APIError) { Glovebox::Box.hosted(:e2b, api_key: "k", api_url: "http://10.1.2.3:1").run("true") }
    assert_match(/plain http only to a loopback address/, e.message)
  ensure
    fake&.stop
  end

  # A stand-in for E2B's API, as box/e2b's Go tests fake it: POST
  # /sandboxes, envd's POST /files and process.Process/Start (a Connect
  # stream of JSON envelopes), DELETE /sandboxes/{id}. It "runs" a
  # process by echoing what it was asked to run.
  class FakeE2B
    attr_reader :keys, :files, :lifecycle

    def initialize
      @keys = []
      @files = {}
      @lifecycle = []
      @web = LocalHTTP.new { |conn, method, path, headers, body| serve(conn, method, path, headers, body) }
    end

    def url = @web.url("")

    def stop = @web.stop

    private

    def serve(conn, method, path, headers, body)
      @keys << headers["x-api-key"]
      case [method, path.split("?").first]
      when ["POST", "/sandboxes"]
        @lifecycle << "created"
        [201, {}, JSON.generate("sandboxID" => "sb1")]
      when ["DELETE", "/sandboxes/sb1"]
        @lifecycle << "deleted"
        [204, {}, ""]
      when ["POST", "/files"]
        name = URI.decode_www_form(path.split("?", 2)[1]).to_h["path"]
        @files[name] = body[/\r\n\r\n(.*)\r\n--/m, 1]
        [200, {}, "[]"]
      when ["POST", "/process.Process/Start"]
        req = JSON.parse(body.byteslice(5..))["process"]
        out = "ran #{req["cmd"]} #{req["args"].join(" ")} #{req["envs"].map { |k, v| "#{k}=#{v}" }.join(" ")}\n"
        conn.write("HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\nConnection: close\r\n\r\n")
        [{ "event" => { "start" => { "pid" => 1 } } }, { "event" => { "data" => { "stdout" => [out].pack("m0") } } },
         { "event" => { "end" => { "exitCode" => 0, "status" => "exited" } } }].each { |m| conn.write(envelope(0, m)) }
        conn.write(envelope(2, {}))
        nil
      else
        [404, {}, ""]
      end
    end

    def envelope(flags, msg)
      j = JSON.generate(msg)
      [flags, j.bytesize].pack("CN") + j
    end
  end
end
