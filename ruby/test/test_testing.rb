# frozen_string_literal: true

require_relative "helper"
require "logger"
require "rbconfig"
require "stringio"

# Glovebox::Testing's helpers (here on the test run's local executor),
# Glovebox.setup, the rake task, the `glovebox` wrapper and the binary
# search.
class TestingTest < Minitest::Test
  include ExecutorHarness
  include Glovebox::Testing::Minitest

  class Shop
    def orders = [{ "id" => 1, "total" => 30.5 }, { "id" => 2, "total" => 12 }]
    def refund(id) = "refunded #{id}"
  end

  def setup
    Glovebox::Testing.sandbox_options = { client: executor.client }
  end

  def teardown
    Glovebox::Testing.sandbox_options = {}
  end

  def with_env(vars)
    old = vars.keys.to_h { [_1, ENV[_1]] }
    vars.each { |k, v| ENV[k] = v }
    yield
  ensure
    old.each { |k, v| ENV[k] = v }
  end

  def test_minitest_helpers_pass
    r = glovebox_eval('orders.sum { _1["total"] }', tools: Shop.new)
    assert_glovebox_ok r, 42.5
    assert_equal 1, assert_glovebox_tool_called(r, :orders).size
    refute_glovebox_tool_called r, :refund
    r = glovebox_eval("refund(7)", tools: Shop.new)
    assert_glovebox_tool_called r, :refund, 7
    assert_raises(Minitest::Assertion) { assert_glovebox_tool_called r, :refund, 8 }
    assert_glovebox_status :timeout, glovebox_eval("loop {}", timeout: 0.3)
  end

  def test_minitest_failure_explains_the_guest_error
    r = glovebox_eval("puts 'before'\nraise ArgumentError, 'boom'")
    e = assert_raises(Minitest::Assertion) { assert_glovebox_ok r }
    assert_match(/expected glovebox status ok, got status error/, e.message)
    assert_match(/ArgumentError: boom/, e.message)
    assert_match(/sandbox:2/, e.message) # the guest backtrace
    assert_match(/stdout: "before\\n"/, e.message)
    e = assert_raises(Minitest::Assertion) { assert_glovebox_ok glovebox_eval("1 + 1"), 3 }
    assert_match(/expected glovebox value 3, got status ok, value 2/, e.message)
  end

  def test_rspec_matchers
    m = Object.new.extend(Glovebox::Testing::RSpec)
    r = m.glovebox_eval("orders.size", tools: Shop.new)
    assert m.be_glovebox_ok.matches?(r)
    assert m.be_glovebox_ok(2).matches?(r)
    miss = m.be_glovebox_ok(3)
    refute miss.matches?(r)
    assert_match(/expected glovebox status ok with value 3, got status ok, value 2/, miss.failure_message)
    assert m.have_called_tool(:orders).matches?(r)
    refute m.have_called_tool(:refund).matches?(r)
    assert m.have_glovebox_status("ok").matches?(r)
    err = m.glovebox_eval("nope")
    assert m.have_glovebox_status(:error).matches?(err)
    ok = m.be_glovebox_ok
    refute ok.matches?(err)
    assert_match(/NameError/, ok.failure_message)
  end

  def test_local_executor_is_shared_and_restartable
    assert_same executor, Glovebox::Testing.local_executor(bin: ExecutorHarness.bin)
    ex = Glovebox::Testing::LocalExecutor.new(bin: ExecutorHarness.bin)
    dir = ex.dir
    begin
      assert_glovebox_ok ex.sandbox.eval("6 * 7"), 42
      ex.stop
      assert_nil ex.pid
      ex.start
      assert_glovebox_ok ex.sandbox.eval("1"), 1
    ensure
      ex.close
    end
    refute File.exist?(dir), "close removes the directory it made"
  end

  def test_setup_reports_both_images_to_the_logger
    out = StringIO.new
    line = with_env("GLOVEBOX_BIN" => ExecutorHarness.bin) { Glovebox.setup(log: Logger.new(out)) }
    assert_match(/\Aglovebox is ready \(ruby 4\.0/, line)
    assert_match(/image 1 of 2, the Ruby image for evals without a fuel budget: ready/, out.string)
    assert_match(/image 2 of 2, the fuel-metered Ruby image for evals with a fuel budget: ready/, out.string)
    assert_match(/INFO -- : glovebox is ready/, out.string)
  end

  def test_setup_failure_raises_with_the_output
    Dir.mktmpdir do |d|
      bad = File.join(d, "glovebox")
      File.write(bad, "#!/bin/sh\necho 'glovebox: no space left on device' >&2\nexit 2\n")
      File.chmod(0o755, bad)
      e = assert_raises(Glovebox::SetupError) do
        with_env("GLOVEBOX_BIN" => bad) { Glovebox.setup(log: StringIO.new) }
      end
      assert_match(/glovebox setup \(#{Regexp.escape(bad)}\) failed/, e.message)
      assert_match(/no space left on device/, e.message)
    end
  end

  # Glovebox.setup(mounts:) and the rake task's argument become `glovebox
  # setup --mount HOST:GUEST[:rw]`, host paths made absolute, in order.
  def test_setup_passes_a_mount_layout
    Dir.mktmpdir do |d|
      fake = File.join(d, "glovebox")
      File.write(fake, "#!/bin/sh\necho \"args: $*\"\necho 'glovebox is ready (fake)'\n")
      File.chmod(0o755, fake)
      out = StringIO.new
      with_env("GLOVEBOX_BIN" => fake) do
        Glovebox.setup(log: out, mounts: [{ host: "data", guest: "/data" }, { "host" => "/srv/out", "guest" => "/out", "writable" => true }])
      end
      assert_includes out.string, "args: setup --mount #{File.expand_path("data")}:/data --mount /srv/out:/out:rw\n"
      assert_raises(ArgumentError) { Glovebox.setup(log: StringIO.new, mounts: [{ guest: "/data" }]) }

      require "rake"
      Rake::TaskManager.record_task_metadata = true # before the tasks are defined, as `rake -T` sets it
      require "glovebox/rake"
      assert_equal [{ host: "./a", guest: "/a", writable: false }, { host: "/b", guest: "/b", writable: true }],
                   Glovebox::RakeTasks.mounts("./a:/a /b:/b:rw")
      assert_equal [], Glovebox::RakeTasks.mounts(nil)
      assert_raises(ArgumentError) { Glovebox::RakeTasks.mounts("/a:/a:rx") }
    rescue LoadError
      skip "rake is not installed (Debian: apt-get install rake)"
    end
  end

  def test_rake_task_runs_setup
    begin
      require "rake"
    rescue LoadError
      skip "rake is not installed (Debian: apt-get install rake)"
    end
    Rake::TaskManager.record_task_metadata = true # as `rake -T` sets it: keep descriptions
    require "glovebox/rake"
    task = Rake::Task["glovebox:setup"]
    assert_match(/no eval waits/, task.comment)
    _, err = capture_subprocess_io { with_env("GLOVEBOX_BIN" => ExecutorHarness.bin) { task.invoke } }
    assert_match(/glovebox is ready/, err)
  end

  # The gem's `glovebox` command runs the binary it finds, and says how to
  # get one when there is none.
  def test_wrapper_execs_the_binary_or_explains
    exe = File.expand_path("../exe/glovebox", __dir__)
    out = IO.popen({ "GLOVEBOX_BIN" => ExecutorHarness.bin }, [RbConfig.ruby, exe, "eval", "-e", "6 * 7"], &:read)
    assert_equal "=> 42\n", out
    assert_predicate $?, :success?
    Dir.mktmpdir do |empty|
      out = IO.popen({ "GLOVEBOX_BIN" => nil, "PATH" => empty }, [RbConfig.ruby, exe, "version"], err: %i[child out], &:read)
      assert_equal 127, $?.exitstatus
      assert_match(/no glovebox binary/, out)
      assert_match(/x86_64-linux, aarch64-linux/, out)
    end
  end

  # A RubyGems or Bundler binstub named glovebox on PATH (the plain gem's
  # own command) is not taken for the binary: the real one after it is.
  def test_binary_search_skips_ruby_binstubs
    Dir.mktmpdir do |d|
      stubs = File.join(d, "stubs")
      real = File.join(d, "real")
      [stubs, real].each { Dir.mkdir(_1) }
      File.write(File.join(stubs, "glovebox"), <<~RB)
        #!/usr/bin/env ruby
        # This file was generated by RubyGems.
        require "rubygems"
        load Gem.activate_bin_path("glovebox", "glovebox", ">= 0.a")
      RB
      File.write(File.join(real, "glovebox"), "#!/bin/sh\nexec true\n")
      [stubs, real].each { File.chmod(0o755, File.join(_1, "glovebox")) }
      got = with_env("GLOVEBOX_BIN" => nil, "PATH" => [stubs, real].join(File::PATH_SEPARATOR)) { Glovebox::Native.binary }
      assert_equal File.join(real, "glovebox"), got
    end
  end
end
