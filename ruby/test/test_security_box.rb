# frozen_string_literal: true

require_relative "helper"
require "tmpdir"

# security_box's spelling (Glovebox.eval, profiles, SB.call rpcs, pools),
# embedded, against the real binary.
class SecurityBoxTest < Minitest::Test
  include ThroughExecutor

  def teardown = Glovebox.reset_profiles!

  def test_one_liner
    r = Glovebox.eval("puts 'hello'; 40 + 2")
    assert_equal 42, r.value
    assert_equal "hello\n", r.stdout
    assert r.status == :ok
    assert r.status == "ok"
    assert_equal "ok", r.status
    assert r.status.ok?
    refute r.status.error?
    assert_equal :ok, r.status.to_sym
    assert_kind_of Float, r.duration_ms
    assert_operator r.duration_ms, :>, 0
    assert_equal [], r.rpcs
  end

  def test_status_taxonomy_both_spellings
    assert_equal :timeout, Glovebox.eval("loop {}", timeout: 0.5).status.to_sym
    assert Glovebox.eval("while true; end", timeout_ms: 500).status == :timeout
    r = Glovebox.eval("while true; end", fuel: 1_000_000)
    assert r.status.fuel_exhausted?, r.status
    assert_equal 1_000_000, r.fuel_used
    r = Glovebox.eval("a = []; loop { a << ('x' * 1024) }", memory_size: 128 * 1024 * 1024, timeout_ms: 15_000)
    assert r.status == :memory_limit, r.status
    r = Glovebox.eval("def boom; raise ArgumentError, 'boom'; end; boom")
    assert r.status == :error
    assert_equal "ArgumentError", r.error["class"]
    assert_equal "boom", r.error["message"]
    assert_equal ["sandbox:1:in 'Object#boom'", "sandbox:1:in '<main>'"], r.error["backtrace"]
    assert_equal({ "class" => "ArgumentError", "message" => "boom", "backtrace" => r.error.backtrace }, r.error.to_h)
    assert_equal Glovebox::Status::ALL.keys.sort, Glovebox::Status::ALL.keys.map { Glovebox::Status[_1].to_s }.sort
  end

  # The code's own lines and errors, whatever the wrapper the gem sends
  # around it: line numbers, syntax errors, a magic comment, locals.
  def test_code_is_the_guests_own
    r = Glovebox.eval("x = 1\ny = 2\nraise 'at three'")
    assert_equal ["sandbox:3:in '<main>'"], r.error.backtrace
    r = Glovebox.eval("def f(\n")
    assert_equal "SyntaxError", r.error["class"]
    assert_equal [1, 2, "sandbox"], Glovebox.eval("a = __LINE__\n[a, __LINE__, __FILE__]").value
    assert_equal true, Glovebox.eval("# frozen_string_literal: true\n'a'.frozen?").value
    assert_equal false, Glovebox.eval("'a'.frozen?").value
    assert_equal "GLOVEBOX_CODE_x\n", Glovebox.eval("puts 'GLOVEBOX_CODE_x'").stdout
  end

  def test_output_limits_keep_to_their_bytes
    r = Glovebox.eval('1000.times { print "x" * 1000 }', stdout_limit: 4096)
    assert_operator r.stdout.bytesize, :<=, 4096
    assert r.stdout_truncated
    r = Glovebox.eval('$stderr.print "e" * 10_000; 1', stderr_limit: 1000)
    assert_operator r.stderr.bytesize, :<=, 1000
    assert r.stderr_truncated
    # glovebox's own Sandbox keeps its marker.
    r = Glovebox::Sandbox.new(output: 1000).eval('print "x" * 5000')
    assert_match(/\[glovebox: stdout truncated at 1000 bytes\]\n\z/, r.stdout)
  end

  def test_input_and_env
    r = Glovebox.eval("[$stdin.read, ARGV, ENV.to_h]", stdin: "in", args: ["a", "b"], env: { "LANG" => "C", "MODE" => "batch" })
    assert_equal ["in", ["a", "b"], { "LANG" => "C", "MODE" => "batch" }], r.value
    assert_equal({}, Glovebox.eval("ENV.to_h").value)
    ENV["GLOVEBOX_TEST_SECRET"] = "s3cret"
    refute_includes Glovebox.eval("ENV.to_h.to_s").value, "s3cret"
  ensure
    ENV.delete("GLOVEBOX_TEST_SECRET")
  end

  def test_bad_settings_name_the_option
    {
      { env: { "A=B" => "1" } } => /env: "A=B": a name cannot hold "=" or a NUL byte/,
      { env: { "A" => "x\0" } } => /env: A: the value holds a NUL byte/,
      { timeout_ms: -1 } => /timeout_ms: -1 is not a positive number/,
      { timeout: 1, timeout_ms: 1000 } => /timeout is given twice/,
      { fuel: 1, fuel_ms: 1 } => /fuel: and fuel_ms: are mutually exclusive/,
      { memory: 1 << 20 } => /memory: 1048576 bytes is below the .*-byte floor/,
      { bogus: 1 } => /unknown setting bogus:/,
      { image_path: "/x.wasm" } => /image_path: the Ruby image is the process's/,
      { mounts: [{ host: "/", guest: "data" }] } => /mounts: "data": the guest path is relative/,
      { mounts: [{ host: "/", guest: "/tmp/x" }] } => %r{mounts: "/tmp/x": the guest path overlaps /tmp},
      { mounts: [{ host: "/", guest: "/usr" }] } => %r{overlaps /usr},
      { mounts: [{ host: "/", guest: "/d/../e" }] } => /not normalized \(it would be \/e\)/,
      { mounts: [{ host: "/", guest: "/d", mode: :append }] } => /mode: :append/,
      { mounts: [{ host: "/nonexistent-glovebox", guest: "/d" }] } => %r{host directory /nonexistent-glovebox does not exist},
      { mounts: [{ host: "/", guest: "/d" }, { host: "/", guest: "/d/e" }] } => %r{/d and /d/e nest},
      { rpcs: { "x" => 1 } } => /rpcs: x: Integer does not respond to call/,
    }.each do |opts, msg|
      e = assert_raises(Glovebox::InvalidConfiguration, opts.inspect) { Glovebox.eval("1", **opts) }
      assert_match msg, e.message, opts.inspect
    end
  end

  def test_rpcs_through_sb_call
    calls = []
    rpcs = {
      "github.search" => ->(args) { calls << args; { items: [{ path: "lib/#{args["q"]}.rb", score: 1.5 }] } },
      "calc" => ->(args) { args.fetch("a") + args.fetch("b") },
      "boom" => ->(_) { raise KeyError, "no such key" },
      "odd" => ->(_) { Object.new },
    }
    r = Glovebox.eval(<<~RUBY, rpcs: rpcs)
      hits = SB.call("github.search", q: "wasm", "nested" => { "k" => [1] })
      boom = begin; SB.call("boom"); rescue SB::ToolError => e; [e.class.name, e.message]; end
      unknown = begin; SB.call("missing"); rescue SB::UnknownTool => e; e.class.ancestors.include?(SB::ToolError); end
      [hits.items.first.path, hits[:items][0]["score"], SB.call("calc", { "a" => 1 }, b: 2), boom, unknown,
       SB.call("odd").start_with?("#<Object"), SB.tools.sort]
    RUBY
    assert r.status.ok?, r.error.to_s
    assert_equal ["lib/wasm.rb", 1.5, 3, ["SB::ToolError", "KeyError: no such key"], true, true,
                  ["boom", "calc", "github.search", "odd"]], r.value
    assert_equal({ "q" => "wasm", "nested" => { "k" => [1] } }, calls.first)
    assert_equal "github.search", r.rpcs.first["name"]
    assert_equal({ "q" => "wasm", "nested" => { "k" => [1] } }, r.rpcs.first["args"])
    assert r.rpcs.frozen? && r.rpcs.first.frozen?
    bad = r.rpcs.find { _1["name"] == "boom" }
    assert_equal [false, "no such key"], bad.values_at("ok", "error")
    # No handlers: a clean, rescuable error.
    r = Glovebox.eval('begin; SB.call("x"); rescue SB::UnknownTool => e; e.message; end')
    assert_equal 'no host tool named "x" (none are bound)', r.value
  end

  def test_profiles
    Glovebox.register(:default_sb) do |c|
      c.fuel 10_000_000_000
      c.timeout_ms 2_000
    end
    lean = Glovebox.register(:lean_sb, from: :default_sb) do |c|
      c.fuel 2_000_000_000
      c.timeout_ms 500
      c.env "MODE" => "lean"
    end
    assert_equal 0.5, lean.timeout
    assert_equal 500, lean.timeout_ms
    assert_equal :lean_sb, lean.name
    assert lean.frozen?
    box = Glovebox.spawn(:lean_sb)
    assert_equal 42, box.eval("40 + 2").value
    assert_equal "lean", box.eval("ENV['MODE']").value
    assert_equal 0.1, Glovebox.spawn(:lean_sb, timeout_ms: 100).limits[:timeout]
    assert_equal 0.5, Glovebox.profile(:lean_sb).timeout, "overrides never change the profile"
    assert_equal 500, box.limits[:timeout] * 1000
    assert_equal 1.0, box.with(timeout_ms: 1000).limits[:timeout]
    assert_equal 0.5, box.limits[:timeout]
    assert box.eval("loop {}", timeout_ms: 200).status.timeout?
    assert_nil Glovebox.spawn.profile.timeout
    e = assert_raises(Glovebox::InvalidConfiguration) { Glovebox.register(:lean_sb) { |c| c.fuel 1 } }
    assert_match(/lean_sb.*exists already/, e.message)
    e = assert_raises(Glovebox::InvalidConfiguration) { Glovebox.spawn(:nope) }
    assert_match(/no profile named :nope \(registered: default_sb, lean_sb\)/, e.message)
    e = assert_raises(Glovebox::InvalidConfiguration) { Glovebox.register(:x, from: :nope) }
    assert_match(/no profile named :nope/, e.message)
    e = assert_raises(Glovebox::InvalidConfiguration) { Glovebox.register(:y) { |c| c.fuel 1; c.fuel_ms 1 } }
    assert_match(/mutually exclusive/, e.message)
    refute_includes Glovebox.profiles, :y
  end

  def test_configuration_build_with_fingerprint
    config = Glovebox::Configuration.build(fuel: 10_000_000_000, fuel_ms: nil, timeout_ms: 2_000, memory_size: 512 * 1024 * 1024,
                                           stdout_limit: 1 << 20, stderr_limit: 1 << 16, epoch_interval_ms: 25,
                                           env: { "LANG" => "C" }, mounts: [], rpcs: {})
    assert_kind_of Glovebox::Profile, config
    assert config.frozen?
    lean = config.with(timeout_ms: 500, fuel: 5_000_000)
    assert_equal [2.0, 0.5, 5_000_000], [config.timeout, lean.timeout, lean.fuel]
    assert_equal 512 * 1024 * 1024, config.memory_size
    assert_equal Glovebox::Exposure::MEMORY_FLOOR + (512 * 1024 * 1024), config.memory
    sandbox = Glovebox::Sandbox.new(lean)
    assert_equal 2, sandbox.eval("1 + 1").value
    assert_equal 9, sandbox.eval("3 * 3").value
    same = Glovebox::Configuration.build(timeout_ms: 2_000, fuel: 10_000_000_000, memory_size: 512 * 1024 * 1024,
                                         stdout_limit: 1 << 20, stderr_limit: 1 << 16, epoch_interval_ms: 25,
                                         env: { "LANG" => "C" }, mounts: [], rpcs: { "x" => ->(_) {} })
    assert_equal config.fingerprint, same.fingerprint, "rpc handlers are not part of the fingerprint"
    refute_equal config.fingerprint, lean.fingerprint
    assert_match(/\A\h{64}\z/, config.fingerprint)
    ms = Glovebox::Configuration.build(fuel_ms: 100)
    assert_equal 100 * Glovebox::Profile::FUEL_PER_MS, ms.effective_fuel
    assert_raises(Glovebox::InvalidConfiguration) { ms.with(fuel: 5) }
    assert_equal 5, ms.with(fuel_ms: nil, fuel: 5).effective_fuel
    r = Glovebox.spawn(ms).eval("i = 0; while i < 5_000_000; i += 1; end")
    assert r.status == :fuel_exhausted, r.status
  end

  def test_mounts_read_only_by_default
    Dir.mktmpdir do |dir|
      data = File.join(dir, "data")
      state = File.join(dir, "state")
      [data, state].each { Dir.mkdir(_1) }
      File.write(File.join(data, "input.csv"), "a,b\n1,2\n")
      Dir.chdir(dir) do
        Glovebox.register(:reader_sb) do |c|
          c.mount "./data" => "/data"
          c.mount_rw "./state" => "/state"
        end
      end
      assert_equal [{ host: data, guest: "/data", writable: false }, { host: state, guest: "/state", writable: true }],
                   Glovebox.profile(:reader_sb).mounts
      box = Glovebox.spawn(:reader_sb)
      assert_equal "a,b\n1,2\n", box.eval('File.read("/data/input.csv")').value
      r = box.eval('File.write("/data/x.txt", "no")')
      assert r.status.error?
      assert_match(/Errno::E(PERM|ACCES|ROFS)/, r.error["class"])
      refute File.exist?(File.join(data, "x.txt"))
      assert box.eval('File.write("/state/last.txt", "7")').status.ok?
      assert_equal "7", File.read(File.join(state, "last.txt"))
      r = Glovebox.eval('File.read("/d/input.csv")', mounts: [{ host: data, guest: "/d", mode: :read_only }])
      assert_equal "a,b\n1,2\n", r.value
    end
  end

  def test_pool
    Glovebox.register(:pooled_sb) { |c| c.timeout_ms 5_000 }
    pool = Glovebox.pool(:pooled_sb, size: 2)
    assert_equal 42, pool.eval("40 + 2").value
    assert_equal 2, pool.checkout { |sb| sb.eval("1 + 1").value }
    results = Array.new(4) { |i| Thread.new { pool.eval("sleep 0.2; #{i}").value } }.map(&:value)
    assert_equal [0, 1, 2, 3], results
    m = pool.metrics
    assert_equal 2, m[:size]
    assert_operator m[:created], :<=, 2
    assert_equal 5, m[:evals]
    assert_operator m[:avg_ms], :>, 0
    assert_equal 0, m[:in_use]
    pool.shutdown
    assert pool.closed?
    assert_raises(Glovebox::Error) { pool.eval("1") }
    assert_raises(Glovebox::InvalidConfiguration) { Glovebox.pool(:pooled_sb, size: 0) }
  end

  def test_warmup
    assert_equal true, Glovebox.warmup
    assert_equal true, Glovebox.warmup(timeout_ms: 5_000)
  end

  # The same spelling through an executor (Glovebox.executor set): rpcs
  # through SB.call, env (per eval and in a session), limits, errors.
  def test_through_an_executor
    through_executor do
      r = Glovebox.eval('[SB.call("add", a: 1, b: 2), ENV.to_h]', env: { "MODE" => "remote" },
                        rpcs: { "add" => ->(args) { args["a"] + args["b"] } })
      assert r.status.ok?, r.error.to_s
      assert_equal [3, { "MODE" => "remote" }], r.value
      assert_equal "add", r.rpcs.first["name"]
      assert Glovebox.eval("loop {}", timeout_ms: 500).status == :timeout
      assert_equal ["sandbox:1:in 'Object#boom'", "sandbox:1:in '<main>'"],
                   Glovebox.eval("def boom = raise('x'); boom").error["backtrace"]
      sb = Glovebox::Sandbox.new(env: { "A" => "1" })
      refute sb.embedded?
      sb.session do |s|
        s.eval('ENV["B"] = "2"')
        assert_equal({ "A" => "1" }, s.eval("ENV.to_h").value, "each eval of the session gets the sandbox's env")
      end
      assert_raises(Glovebox::ConfigError) { Glovebox.eval("1", mounts: [{ host: "/", guest: "/d" }]) }
    end
  end
end
