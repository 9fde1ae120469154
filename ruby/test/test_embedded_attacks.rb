# frozen_string_literal: true

require_relative "helper"
require_relative "desk_tools"
require "tmpdir"
require "fileutils"
require "rbconfig"
require "fcntl"

# A guest (or whoever holds a paused eval's key) attacking this process
# through the embedded child: each test is an attack that worked once,
# kept so it cannot come back.
class EmbeddedAttackTest < Minitest::Test
  class BigTools
    def big(bytes) = "x" * bytes
    def take(value) = value.size
    def slow = sleep(0.05) && 1
  end

  def setup = Glovebox::Child.stop

  def teardown = Glovebox::Child.stop

  # A tool answer over the protocol's 64 MiB frame once made the child
  # close the channel; the channel went back to the pool, and the next
  # request on it found the child "dead": the gem killed the child, and
  # every other thread's eval ended canceled. Now the guest gets
  # Glovebox::ToolPayloadError (rescuable), the transcript says
  # "oversized", and the other thread's eval and the next one are
  # unharmed.
  def test_an_oversized_tool_answer_fails_alone
    other = Thread.new do
      sb = Glovebox::Sandbox.new(tools: BigTools.new, timeout: 60)
      sb.eval("slow")
      sb.eval("30.times { slow }; :other_done")
    end
    sleep 0.5
    sb = Glovebox::Sandbox.new(tools: BigTools.new, timeout: 60)
    r = sb.eval("begin; big(#{(64 << 20) + 10}).size; rescue Glovebox::ToolPayloadError => e; e.class.name; end")
    assert_equal ["ok", "Glovebox::ToolPayloadError"], [r.status, r.value], r.error.inspect
    assert_equal "oversized", r.tool_calls.first.outcome
    assert_nil r.tool_calls.first.result
    o = other.value
    assert_equal ["ok", "other_done"], [o.status, o.value], o.error.inspect
    assert_equal 2, sb.eval("1 + 1").value
  end

  # A request over the frame (a 70 MB program or stdin) is refused here,
  # nothing sent; the channel and the child go on.
  def test_an_oversized_request_is_refused_before_it_is_sent
    sb = Glovebox::Sandbox.new(tools: BigTools.new)
    pid = (sb.eval("1").ok? && Glovebox::Child.running.pid)
    e = assert_raises(Glovebox::APIError) { sb.eval("1", stdin: "x" * (64 << 20)) }
    assert_equal "request_too_large", e.code
    assert_equal 3, sb.eval("1 + 2").value
    assert_equal pid, Glovebox::Child.running.pid
  end

  # A guest calling a tool with large arguments over and over once made
  # this process keep every call's arguments in Result#tool_calls (a
  # 1 MB String 1,000 times: RSS near 1 GB per eval). The transcript
  # keeps MAX_TRANSCRIPT_DATA bytes; later entries are elided, and the
  # tool still gets every argument whole.
  def test_the_transcript_keeps_at_most_a_mebibyte
    sb = Glovebox::Sandbox.new(tools: BigTools.new, timeout: 60)
    r = sb.eval('s = "y" * 200_000; 12.times.map { take(s) }.sum')
    assert_equal ["ok", 12 * 200_000], [r.status, r.value], r.error.inspect
    kept, elided = r.tool_calls.partition { !(_1.respond_to?(:elided) && _1.elided) }
    assert_equal 12, r.tool_calls.size
    assert_operator kept.size, :>=, 4
    assert_operator elided.size, :>=, 6
    assert(elided.all? { _1.args == [] && _1.kwargs == {} && _1.result.nil? && _1.ok? })
    assert_operator kept.sum { _1.args.first.bytesize }, :<=, Glovebox::MAX_TRANSCRIPT_DATA
  end

  # A paused eval's key carries the suspend list in the clear: emptied,
  # it once let the eval's later calls of the paused tool run without
  # pausing (one approval, two plan changes). The key is now MAC'd: an
  # edited, cut or swapped key is refused state_refused, nothing runs,
  # and the key as made still continues.
  def test_an_edited_pause_key_is_refused
    dir = Dir.mktmpdir("glovebox-claims")
    Glovebox.state_key = "5a" * 32
    Glovebox.state_dir = dir
    tools = DeskTools.new
    sb = Glovebox::Sandbox.new(tools: tools, suspend: [:change_plan])
    r = sb.eval('[change_plan("pro"), change_plan("enterprise")]')
    assert_equal "suspended", r.status, r.error.inspect
    raw = r.key.delete_prefix("gbp1.").tr("-_", "+/")
    raw = (raw + ("=" * ((4 - (raw.size % 4)) % 4))).unpack1("m0")
    n = raw.unpack1("N")
    meta = JSON.parse(raw.byteslice(4, n))
    assert_equal ["change_plan"], meta["suspend"]
    edited = JSON.generate(meta.merge("suspend" => []))
    forged = "gbp1.#{[[edited.bytesize].pack("N") + edited + raw.byteslice(4 + n..)].pack("m0").tr("+/", "-_").delete("=")}"
    [forged, r.key[0...-8]].each do |bad|
      e = assert_raises(Glovebox::RunError) { sb.continue(bad, approve: true) }
      assert_equal "state_refused", e.code
    end
    assert_empty tools.changed
    r2 = sb.continue(r.key, approve: true)
    assert_equal "suspended", r2.status, "the second change_plan pauses too"
    assert_equal ["pro"], tools.changed
  ensure
    Glovebox.state_key = nil
    Glovebox.state_dir = nil
    FileUtils.rm_rf(dir) if dir
  end

  # Glovebox never encodes deeper than 128 levels; deeper text (a child
  # that broke the protocol) is refused by the parser's own bound before
  # Ruby's C parser recurses on the stack (a million levels spun for
  # minutes).
  def test_deep_wire_text_is_refused_quickly
    assert_equal [[[1]]], Glovebox::Value.load("[[[1]]]")
    assert_raises(JSON::NestingError) { Glovebox::Value.load(("[" * 1_000_000) + ("]" * 1_000_000)) }
  end

  # A platform gem's image sits beside its binary, which checks it
  # against the SHA-256 it pins; the gem once also named it in
  # GLOVEBOX_IMAGE, which the binary takes unchecked, so a damaged or
  # tampered file got past the check. A copy of lib/ with a binary and a
  # wrong image packed under glovebox/native stands in for the gem.
  def test_a_tampered_packed_image_is_refused_by_its_hash
    Dir.mktmpdir("glovebox-gem") do |dir|
      FileUtils.cp_r(File.expand_path("../lib", __dir__), dir)
      native = File.join(dir, "lib", "glovebox", "native")
      FileUtils.mkdir_p(native)
      FileUtils.cp(ENV.fetch("GLOVEBOX_BIN"), File.join(native, "glovebox"))
      File.binwrite(File.join(native, "ruby+stdlib.wasm"), "\0asm\1\0\0\0 not the pinned image")
      env = { "GLOVEBOX_BIN" => nil, "GLOVEBOX_IMAGE" => nil, "GLOVEBOX_CACHE_DIR" => File.join(dir, "cache") }
      script = 'require "glovebox"; begin; Glovebox::Sandbox.new.eval("1"); rescue Glovebox::Error => e; print e.message; end'
      out = IO.popen(env, [RbConfig.ruby, "-I", File.join(dir, "lib"), "-e", script], err: File::NULL, &:read)
      assert_match(/ruby\+stdlib\.wasm \(the Ruby image beside the glovebox executable\) has SHA-256 \h+, want \h+/, out)
    end
  end

  # A command's outputs/ is read by the child, on the host: a link there
  # to a host file is not followed, a file over the limits is left out,
  # and RunResult#outputs_truncated says something was (the flag was
  # only in #record).
  def test_box_outputs_follow_no_link_and_say_what_was_left_out
    box = Glovebox::Box.new
    skip "no OS sandbox here: #{box.info["error"]}" if box.info["error"]
    secret = File.join(Dir.mktmpdir("glovebox-host"), "secret.txt")
    File.write(secret, "host secret")
    r = box.run(shell: "mkdir -p outputs; echo hi > outputs/a; ln -s #{secret} outputs/link; " \
                       "ln -s / outputs/root; head -c 20000000 /dev/zero > outputs/big")
    assert_equal({ "a" => "hi\n" }, r.outputs)
    assert r.outputs_truncated
    refute_match(/host secret/, r.record.to_s)
    refute box.run(shell: "mkdir -p outputs; echo hi > outputs/a").outputs_truncated
  ensure
    FileUtils.rm_rf(File.dirname(secret)) if secret
  end

  # A process forked while another thread's eval was under way kept that
  # thread's channel to the parent's child open for good (only idle
  # channels were closed): a descriptor leaked per eval in flight, and
  # the parent's child never saw the channel end. Every channel is closed
  # in the forked process now.
  def test_a_fork_keeps_no_channel_of_the_parents_child
    sockets = -> { Dir["/proc/self/fd/*"].filter_map { File.readlink(_1) rescue nil }.grep(/\Asocket:/) }
    before = sockets.call
    sb = Glovebox::Sandbox.new(tools: { slow: -> { sleep 1.5 } })
    sb.eval("1")
    t = Thread.new { sb.eval("slow; :done") }
    sleep 0.5
    held = sockets.call - before # the control socket and the eval's channel
    assert_operator held.size, :>=, 2
    r, w = IO.pipe
    pid = fork do
      r.close
      w.write(JSON.generate(sockets.call & held))
      w.close
      exit!(0)
    end
    w.close
    kept = JSON.parse(r.read)
    Process.wait(pid)
    assert_empty kept, "sockets of the parent's channels in the forked process"
    assert_equal "done", t.value.value
  end

  # A guest choosing arguments that make a tool recurse too deep, or a
  # tool raising NotImplementedError or LoadError, once raised that
  # exception out of Sandbox#eval into the app (a Rails request's 500);
  # now the guest gets Glovebox::ToolError and the eval goes on.
  class FragileTools
    def deep(n) = n.zero? ? 0 : 1 + deep(n - 1)
    def todo = raise(NotImplementedError, "later")
    def plugin = require("glovebox_no_such_library")
  end

  def test_a_tool_failing_outside_standard_error_is_the_guests_error
    sb = Glovebox::Sandbox.new(tools: FragileTools.new)
    r = sb.eval("%w[deep todo plugin].map { |n| begin; n == 'deep' ? deep(10_000_000) : Glovebox.call(n); rescue Glovebox::ToolError => e; e.class.name; end }")
    assert_equal ["ok", ["Glovebox::ToolError"] * 3], [r.status, r.value], r.error.inspect
    assert_equal %w[error error error], r.tool_calls.map(&:outcome)
    assert_match(/stack level too deep/, r.tool_calls.first.error)
  end

  # What a guest can do to itself ends its eval with a status; the child
  # serving every thread of the app goes on (same pid).
  def test_guest_attacks_end_the_eval_never_the_child
    sb = Glovebox::Sandbox.new(timeout: 5)
    sb.eval("1")
    pid = Glovebox::Child.running.pid
    {
      "def f(n) = f(n + 1); f(0)" => %w[error SystemStackError],
      "a = []; loop { a << 'x' * 10_000_000 }" => %w[memory_limit NoMemoryError],
      "Process.kill(:KILL, Process.ppid)" => %w[error NotImplementedError],
      "exit!(3)" => %w[error SystemExit],
      "$stdout.write('x' * 50_000_000); :written" => ["ok", nil]
    }.each do |code, (status, klass)|
      r = sb.eval(code)
      assert_equal [status, klass], [r.status, r.error&.class_name], code
      assert_equal pid, Glovebox::Child.running&.pid, "the child after #{code}"
    end
  end

  # A box's command gets only its own files, the variables it is given
  # (and PATH, HOME, TMPDIR, LANG) and no descriptor of the app's or the
  # child's: not the app's ENV, not Glovebox.child_env, not a descriptor
  # the app opened without close-on-exec after the child started, not
  # the channels of other threads' evals; a file name cannot leave its
  # directory.
  def test_a_box_command_gets_nothing_of_the_app
    box = Glovebox::Box.new
    skip "no OS sandbox here: #{box.info["error"]}" if box.info["error"]
    ENV["GLOVEBOX_APP_SECRET"] = "s3cret-app"
    Glovebox.child_env = { "HTTPS_PROXY" => "http://user:pw@proxy.example:3128" }
    Glovebox::Child.stop
    busy = Thread.new { Glovebox::Sandbox.new(tools: { slow: -> { sleep 1 } }).eval("slow") }
    sleep 0.3
    leaky = File.open(__FILE__)
    leaky.fcntl(Fcntl::F_SETFD, 0)
    r = box.run(shell: "ls /proc/self/fd; echo ---; env | sort", env: { "MODE" => "x" })
    fds, env = r.stdout.split("---\n")
    assert_equal %w[0 1 2 3], fds.split.sort, "the shell's descriptors (3: ls's own directory)"
    assert_empty env.lines.map { _1[/\A[^=]+/] } - %w[HOME LANG MODE PATH PWD SHLVL TMPDIR _ OLDPWD], "the command's variables"
    refute_match(/s3cret|proxy\.example/, r.stdout)
    e = assert_raises(Glovebox::APIError) { box.run(["true"], files: { "../escape" => "x" }) }
    assert_equal "invalid_command", e.code
    assert busy.value.ok?
  ensure
    ENV.delete("GLOVEBOX_APP_SECRET")
    Glovebox.child_env = {}
    leaky&.close
  end
end
