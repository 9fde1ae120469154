# frozen_string_literal: true

require_relative "helper"

class BoxTest < Minitest::Test
  include ExecutorHarness

  def box(ex = executor) = Glovebox::Box.new(client: ex.client)

  def test_run_files_stdin_env_streaming
    seen = []
    r = box.run(["/bin/sh", "main.sh"], files: { "main.sh" => "cat; echo \"$MODE\"; cat data.bin | wc -c; exit 3" },
                                        stdin: "from stdin\n", env: { "MODE" => "fast" }, timeout: 20) { |s, b| seen << [s, b] }
    assert_equal 3, r.exit_status
    assert_match(/\Afrom stdin\nfast\n/, r.stdout)
    refute r.success?
    assert_equal :remote, box.trust
    assert box.off_host?
    assert_equal r.stdout, seen.select { |s, _| s == :stdout }.map(&:last).join
    assert_equal Encoding::BINARY, r.stdout.encoding
  end

  def test_shell_timeout_limits_and_no_network
    r = box.run(shell: "sleep 5", timeout: 0.5)
    assert r.timed_out
    r = box.run(shell: "head -c 5000 /dev/zero | tr '\\0' x", limits: { output: 1000 })
    assert r.stdout_truncated
    assert_equal 1000, r.stdout.bytesize
    r = box.run(shell: "cat /proc/net/route 2>/dev/null | wc -l; getent hosts example.com || echo no-dns")
    assert_match(/no-dns/, r.stdout)
  end

  def test_outputs_and_lazy_credentials
    resolved = 0
    r = box.run(shell: 'mkdir -p outputs; printf "%s" "$API_TOKEN" | wc -c > outputs/n.txt; echo done',
                credentials: { "API_TOKEN" => -> { resolved += 1; "s3cret-value" } })
    assert_equal 1, resolved
    assert_equal({ "n.txt" => "12\n" }, r.outputs.transform_values { _1.strip + "\n" })
    refute_match(/s3cret/, JSON.generate(r.record))
    assert box.enabled?
  end

  def test_same_key_answered_from_the_record
    key = "gem-#{SecureRandom.hex(6)}"
    a = box.run(shell: "echo $$-$RANDOM", key: key)
    b = box.run(shell: "echo $$-$RANDOM", key: key)
    assert_equal a.stdout, b.stdout
    assert b.attached
    e = assert_raises(Glovebox::APIError) { box.run(shell: "echo other", key: key) }
    assert_equal "key_conflict", e.code
    assert_equal 409, e.http_status
  end

  def test_invalid_command_and_oversized
    assert_raises(Glovebox::ConfigError) { box.run }
    e = assert_raises(Glovebox::APIError) { box.run(["true"], files: { "../escape" => "x" }) }
    assert_equal "invalid_command", e.code
    e = assert_raises(Glovebox::APIError) { box.run(["true"], files: { "big" => "x" * 70_000 }) }
    assert_equal "request_too_large", e.code
    assert_match(/max_request_bytes|large/, e.message)
  end

  def test_bad_token
    c = Glovebox::Client.new(url: executor.url, token: "gbx_nope", ca_file: executor.ca_file)
    e = assert_raises(Glovebox::APIError) { Glovebox::Box.new(client: c).run(["true"]) }
    assert_equal "unauthenticated", e.code
  end

  # The executor dies mid-run: the client's error is in doubt and carries
  # the key; after a restart on the same store, a retry under that key
  # gets the definite answer "lost", and the command is not run again.
  def test_killed_mid_run_in_doubt_then_lost
    dir = Dir.mktmpdir("glovebox-kill")
    ex = ExecutorHarness::Executor.new(ExecutorHarness.bin, dir)
    b = box(ex)
    killed = false
    err = assert_raises(Glovebox::InDoubtError) do
      b.run(shell: "echo started; sleep 30", timeout: 60) do |stream, _|
        next if killed || stream != :stdout

        killed = true
        ex.kill9
      end
    end
    assert err.in_doubt?
    assert_match(/\Ar-[0-9a-f]{32}\z/, err.key)
    assert_match(/may have run: retry with the same key/, err.message)
    ex.start
    b = box(ex)
    lost = assert_raises(Glovebox::RunError) { b.retry(err, shell: "echo started; sleep 30", timeout: 60) }
    assert lost.lost?
    assert_equal "lost", lost.code
    assert_equal err.key, lost.key
    assert_equal "lost", assert_raises(Glovebox::RunError) { b.lookup(err.key) }.state
  ensure
    ex&.stop
    FileUtils.rm_rf(dir) if dir
  end

  # Sessions live in one executor's memory: after a restart the next eval
  # of one is a definite RunError "not_found".
  def test_session_gone_after_restart
    dir = Dir.mktmpdir("glovebox-restart")
    ex = ExecutorHarness::Executor.new(ExecutorHarness.bin, dir)
    s = Glovebox::Sandbox.new(client: ex.client).session
    s.eval("x = 1")
    ex.stop
    ex.start
    e = assert_raises(Glovebox::RunError) { s.eval("x") }
    assert_equal "not_found", e.code
    assert_equal "failed", e.state
  ensure
    ex&.stop
    FileUtils.rm_rf(dir) if dir
  end

  # The same for an eval killed while the guest waits on a tool call.
  def test_eval_killed_during_a_tool_call
    dir = Dir.mktmpdir("glovebox-kill")
    ex = ExecutorHarness::Executor.new(ExecutorHarness.bin, dir)
    calls = 0
    tools = Class.new do
      define_method(:ping) do
        calls += 1
        ex.kill9
        "pong"
      end
    end.new
    sb = Glovebox::Sandbox.new(tools: tools, client: ex.client)
    err = assert_raises(Glovebox::InDoubtError) { sb.eval("ping") }
    assert_match(/\Ae-[0-9a-f]{32}\z/, err.key)
    ex.start
    sb = Glovebox::Sandbox.new(tools: tools, client: ex.client)
    lost = assert_raises(Glovebox::RunError) { sb.retry("ping", err) }
    assert_equal "lost", lost.state
    assert_equal 1, calls
  ensure
    ex&.stop
    FileUtils.rm_rf(dir) if dir
  end
end
