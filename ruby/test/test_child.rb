# frozen_string_literal: true

require_relative "helper"
require "rbconfig"
require "tmpdir"
require "fcntl"

# The embedded child's life: started lazily, shared, restarted after a
# fork or its death, stopped at exit with nothing left behind, given
# nothing it was not meant to have. Against the real binary.
class ChildTest < Minitest::Test
  LIB = File.expand_path("../lib", __dir__)

  Adder = Class.new do
    def add(a, b) = a + b
  end

  def adder_box = Glovebox::Sandbox.new(tools: Adder.new)

  # Runs a Ruby script in a new process with the gem loaded; returns its
  # output (stdout and stderr) and status.
  def ruby(script, env: {}, &blk)
    env = { "GLOVEBOX_BIN" => ENV.fetch("GLOVEBOX_BIN") }.merge(env)
    IO.popen(env, [RbConfig.ruby, "-I", LIB, "-e", script], "r+", err: %i[child out]) do |io|
      blk ? blk.call(io) : io.read
    end
  end

  # Process ids whose parent is pid.
  def children_of(pid)
    Dir["/proc/[0-9]*/stat"].filter_map do |f|
      fields = File.read(f).split(") ").last.split
      File.basename(File.dirname(f)).to_i if fields[1].to_i == pid
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end
  end

  # True once pid is gone (or a zombie nobody reaps, all its threads
  # ended) within seconds.
  def gone?(pid, seconds = 5)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    loop do
      state = begin
        st = File.read("/proc/#{pid}/stat").split(") ").last.split.first
        st == "Z" && Dir.children("/proc/#{pid}/task").size <= 1 ? "Z" : st
      rescue Errno::ENOENT, Errno::ESRCH
        nil
      end
      return true if state.nil? || state == "Z"
      return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
  end

  def test_a_sandbox_that_never_evaluates_starts_no_child
    out = ruby(<<~RUBY)
      require "glovebox"
      sb = Glovebox::Sandbox.new(tools: { "orders" => -> { [] } })
      sb.exposed_functions
      Glovebox::Box.new
      kids = Dir["/proc/[0-9]*/stat"].count { |f| (File.read(f).split(") ").last.split[1].to_i rescue 0) == Process.pid }
      print [Glovebox::Child.running.inspect, kids].join(" ")
    RUBY
    assert_equal "nil 0", out
  end

  # Embedded mode needs neither net/http nor openssl: a new process's
  # first result without them.
  def test_embedded_mode_loads_no_http_stack
    out = ruby(<<~RUBY)
      require "glovebox"
      r = Glovebox::Sandbox.new.eval("1 + 1")
      print r.value, " ", $LOADED_FEATURES.grep(%r{/net/http|/openssl}).size, " ", defined?(Net::HTTP).inspect
    RUBY
    assert_equal "2 0 nil", out.lines.last
  end

  def test_shared_by_sandboxes_and_threads_run_concurrently
    a = adder_box
    assert_equal 42, a.eval("add(20, 22)").value
    pid = Glovebox::Child.running.pid
    assert_equal 3, adder_box.eval("add(1, 2)").value
    assert_equal pid, Glovebox::Child.running.pid
    # Each thread's tool waits until the other's has been called: only
    # concurrent evals finish.
    arrived = Queue.new
    go = Queue.new
    meet = Class.new do
      define_method(:meet) do |n|
        arrived << n
        go.pop
        n
      end
    end
    threads = [1, 2].map { |n| Thread.new { Glovebox::Sandbox.new(tools: meet.new, timeout: 20).eval("meet(#{n}) * 10") } }
    2.times { arrived.pop }
    2.times { go << true }
    assert_equal [10, 20], threads.map { _1.value.value }
    assert_equal pid, Glovebox::Child.running.pid
  end

  def test_restarted_after_fork_while_the_parent_keeps_working
    sb = adder_box
    assert_equal 42, sb.eval("add(20, 22)").value
    parent_child = Glovebox::Child.running.pid
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      out = 20.times.map { |i| Glovebox::Sandbox.new(tools: Adder.new).eval("add(#{i}, 1)").value }
      mine = Glovebox::Child.running.pid
      ppid = File.read("/proc/#{mine}/stat").split(") ").last.split[1].to_i
      wr.write(JSON.generate([out.sum, mine, ppid]))
      wr.close
      Glovebox::Child.stop
      exit!(0)
    end
    wr.close
    parent_sums = 20.times.sum { |i| sb.eval("add(#{i}, 2)").value } # meanwhile, in the parent
    sum, mine, ppid = JSON.parse(rd.read)
    Process.wait(pid)
    assert $?.success?
    assert_equal (0...20).sum + 20, sum
    assert_equal (0...20).sum + 40, parent_sums
    refute_equal parent_child, mine
    assert_equal pid, ppid
    assert gone?(mine)
    assert_equal parent_child, Glovebox::Child.running.pid
    assert_equal 5, sb.eval("add(2, 3)").value
  end

  def test_killed_mid_eval_raises_and_the_next_sandbox_works
    assert_equal 1, Glovebox::Sandbox.new.eval("1").value
    victim = Glovebox::Child.running.pid
    killer = Thread.new do
      sleep 0.3
      Process.kill(:KILL, victim)
    end
    e = assert_raises(Glovebox::ChildError) { Glovebox::Sandbox.new(timeout: 20).eval("sleep 10") }
    killer.join
    assert_match(/pid #{victim} died while it served this process: killed by signal 9 \(SIGKILL\)/, e.message)
    assert e.status&.signaled?
    r = adder_box.eval("add(40, 2)")
    assert_equal 42, r.value
    refute_equal victim, Glovebox::Child.running.pid
  end

  # A thread that leaves its eval abnormally (Thread#kill, or an
  # exception raised into it as Rack::Timeout does) closes its channel,
  # and the child stops the guest then, not at the eval's timeout.
  def test_an_abandoned_eval_stops_in_the_child
    child = Glovebox::Child.current
    { "Thread#kill" => :kill.to_proc, "Thread#raise" => ->(t) { t.raise(Interrupt, "request timeout") } }.each do |how, stop|
      %w[loop\ {} sleep\ 60].each do |code|
        t = Thread.new { Glovebox::Sandbox.new(timeout: 60).eval(code) }
        t.report_on_exception = false
        assert until_true(10) { child.info["running"] == 1 }, "#{how}, #{code}: the eval never ran"
        stop.call(t)
        assert_raises(Interrupt) { t.value } if how == "Thread#raise"
        assert until_true(5) { child.info["running"].zero? }, "#{how}, #{code}: the guest still runs in the child 5 s on"
      end
    end
    assert_equal child.pid, Glovebox::Child.current.pid
    assert_equal 42, adder_box.eval("add(40, 2)").value
  end

  # The same for a Box's command: it is killed when its thread leaves.
  def test_an_abandoned_run_stops_in_the_child
    child = Glovebox::Child.current
    skip "no OS sandbox here: #{child.info["box"]["error"]}" if child.info["box"]["error"]
    t = Thread.new { Glovebox::Box.new.run("sleep 60", timeout: 60) }
    t.report_on_exception = false
    assert until_true(10) { child.info["running"] == 1 }, "the run never started"
    t.kill
    assert until_true(5) { child.info["running"].zero? }, "the command still runs in the child 5 s on"
  end

  # A child that died while idle is replaced before the next eval.
  def test_killed_while_idle_is_replaced
    assert_equal 1, Glovebox::Sandbox.new.eval("1").value
    victim = Glovebox::Child.running.pid
    Process.kill(:KILL, victim)
    # Once the kernel reports it exited (waitpid), it is seen as dead.
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    sleep 0.02 while Glovebox::Child.running && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    assert_nil Glovebox::Child.running
    assert_equal 2, Glovebox::Sandbox.new.eval("2").value
    refute_equal victim, Glovebox::Child.running.pid
  end

  def test_a_child_that_fails_to_start_says_why
    Glovebox::Child.stop
    Dir.mktmpdir do |dir|
      plain = File.join(dir, "plain")
      File.write(plain, "not a program")
      script = File.join(dir, "broken")
      File.write(script, "#!/bin/sh\necho 'fatal: no engine here' >&2\nexit 3\n")
      File.chmod(0o755, script)
      {
        File.join(dir, "missing") => /cannot start: GLOVEBOX_BIN=.*missing is not an executable file/,
        plain => /cannot start: GLOVEBOX_BIN=.*plain is not an executable file/,
        script => /exited before it answered its hello.*exited with status 3; its last output: fatal: no engine here/
      }.each do |bin, want|
        with_env("GLOVEBOX_BIN" => bin) do
          e = assert_raises(Glovebox::ChildError) { Glovebox::Sandbox.new.eval("1") }
          assert_match want, e.message
        end
      end
    end
    assert_equal 1, Glovebox::Sandbox.new.eval("1").value
  end

  def test_another_protocol_is_refused
    out = ruby(<<~RUBY)
      require "glovebox"
      Glovebox::Child.send(:remove_const, :PROTOCOL)
      Glovebox::Child.const_set(:PROTOCOL, 99)
      begin
        Glovebox::Sandbox.new.eval("1")
      rescue Glovebox::ChildError => e
        print e.message
      end
    RUBY
    assert_match(/speaks embedded protocol 1, the gem \(\S+\) protocol 99: use the glovebox binary of the gem's own version/, out)
  end

  # The child gets the descriptors and environment it is given, and
  # nothing else of this process.
  def test_no_inherited_descriptor_or_variable
    Glovebox::Child.stop
    Dir.mktmpdir do |dir|
      leak = File.join(dir, "secret.txt")
      File.write(leak, "s3cret")
      fd = IO.sysopen(leak, "r")
      io = IO.for_fd(fd, autoclose: true)
      io.fcntl(Fcntl::F_SETFD, 0) # not close-on-exec: a careless library's descriptor
      with_env("GLOVEBOX_TEST_SECRET" => "s3cret", "AWS_SECRET_ACCESS_KEY" => "nope") do
        assert_equal 1, Glovebox::Sandbox.new.eval("1").value
        pid = Glovebox::Child.running.pid
        env = File.binread("/proc/#{pid}/environ").split("\0").to_h { _1.split("=", 2) }
        assert_equal Glovebox::Child.env.keys.sort, env.keys.sort
        assert_equal Glovebox::Child.env, env
        targets = Dir["/proc/#{pid}/fd/*"].filter_map do |f|
          File.readlink(f)
        rescue Errno::ENOENT
          nil
        end
        refute_includes targets, leak
        # What it holds it opened itself: sockets (its own, and the
        # channels sent to it), the stderr pipe, the engine's cache and
        # scratch files, the Go runtime's reads of /proc and the cgroup.
        odd = targets.reject do |t|
          t.match?(%r{\A(socket|pipe|anon_inode):|\A/dev/null\z|glovebox|\A/proc/#{pid}/|\A/sys/fs/cgroup/})
        end
        assert_empty odd, "descriptors the child holds: #{targets.inspect}"
      end
    ensure
      io&.close
      Glovebox::Child.stop # the next child starts without the leaky descriptor open here
    end
  end

  # At exit the child stops, also with an eval running; and when the
  # process is killed outright, the child notices and exits.
  def test_no_orphan_at_exit_or_when_the_parent_is_killed
    script = <<~RUBY
      require "glovebox"
      $stdout.sync = true
      Thread.new { Glovebox::Sandbox.new(timeout: 30).eval("sleep 20") }
      sleep 0.05 until (c = Glovebox::Child.running)
      puts c.pid
      sleep 0.5
      exit(ARGV[0] == "hang" ? (sleep 60) : 0)
    RUBY
    child = nil
    ruby(script) do |io|
      child = io.gets.to_i
      io.read
    end
    assert $?.success?
    assert gone?(child), "the child #{child} outlived its parent's exit"

    pid = nil
    IO.popen({ "GLOVEBOX_BIN" => ENV.fetch("GLOVEBOX_BIN") }, [RbConfig.ruby, "-I", LIB, "-e", script, "hang"], err: %i[child out]) do |io|
      pid = io.pid
      child = io.gets.to_i
      sleep 1
      Process.kill(:KILL, pid)
      io.read
    end
    assert gone?(child), "the child #{child} outlived its parent's SIGKILL"
  end

  # With no logger set, a process that evaluates writes nothing (the
  # default logger keeps warnings and errors only); a warning is one line
  # with one "glovebox:" prefix; Glovebox.configure replaces the logger.
  def test_default_logger_is_quiet
    out = ruby(<<~RUBY)
      require "glovebox"
      require "stringio"
      Glovebox::Sandbox.new.eval("1")
      Glovebox::Child.stop
      Glovebox.logger.warn("glovebox: image 1 of 2")
      io = StringIO.new
      Glovebox.configure { |c| c.logger = Logger.new(io) }
      Glovebox::Sandbox.new.eval("1")
      50.times { break if io.string.include?("ready"); sleep 0.1 }
      print "custom: ", io.string[/embedded child ready/]
    RUBY
    assert_equal "glovebox: warning: image 1 of 2\ncustom: embedded child ready", out
  end

  def test_child_log_lines_reach_the_logger
    require "logger"
    require "stringio"
    buf = StringIO.new
    old = Glovebox.config.instance_variable_get(:@logger)
    Glovebox.logger = Logger.new(buf)
    Glovebox::Child.stop
    assert_equal 1, Glovebox::Sandbox.new.eval("1").value
    pid = Glovebox::Child.running.pid
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    sleep 0.05 until buf.string.include?("embedded child ready") || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_match(/INFO -- : embedded child ready pid=#{pid}/, buf.string)
  ensure
    Glovebox.logger = old
  end

  private

  # True once the block is, within seconds.
  def until_true(seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    until yield
      return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
    true
  end

  def with_env(vars)
    saved = vars.to_h { |k, _| [k, ENV.fetch(k, nil)] }
    vars.each { |k, v| ENV[k] = v }
    yield
  ensure
    saved.each { |k, v| ENV[k] = v }
  end
end
