# frozen_string_literal: true

# The gem's benchmark, each figure beside its baseline in one run:
#
# 1. One eval with one tool call (add(20, 22), answered by the caller):
#    Ruby embedded (the child the gem starts) beside Go in-process (the
#    library in the benchmark's own process: ruby/internal/gobench
#    -inprocess), then Ruby and Go through one local executor (HTTPS on
#    loopback). Rounds alternate the embedded and in-process runs so a
#    noisy machine shifts both.
# 2. A new Ruby process to its first result, warm cache: `require
#    "glovebox"` and one eval, embedded, beside `ruby -e` alone and the
#    same through the executor. Measured from the spawn to the result
#    (CLOCK_MONOTONIC is one clock for every process), not to the exit.
# 3. Evals per second from 1, 2 and 4 Ruby threads, each with its own
#    Sandbox, beside Go in-process with as many goroutines.
#
#   ruby -Ilib bench/bench.rb [N]        (from ruby/; make bench-ruby)
#
# GLOVEBOX_BIN names the glovebox binary (else it is built).
require_relative "../test/executor_harness"
require "rbconfig"

n = Integer(ARGV[0] || 600)
procs = Integer(ENV.fetch("BENCH_PROCESSES", 15))
seconds = Float(ENV.fetch("BENCH_SECONDS", 3))
ENV["GLOVEBOX_BIN"] = ExecutorHarness.bin
lib = File.expand_path("../lib", __dir__)
tmp = Dir.mktmpdir("glovebox-bench")
gobench = File.join(tmp, "gobench")
system("go", "build", "-o", gobench, "./ruby/internal/gobench", chdir: ExecutorHarness::ROOT) || abort("go build gobench failed")

now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
p50 = ->(a) { a.sort[a.size / 2] }
mean = ->(a) { a.sum / a.size }
adder_class = Class.new { def add(x, y) = x + y }
time_evals = lambda do |sb, count|
  count.times.map do
    t0 = now.call
    r = sb.eval("add(20, 22)")
    abort "ruby: #{r.status} #{r.value.inspect} #{r.error.inspect}" unless r.value == 42
    (now.call - t0) * 1000
  end
end
go_line = lambda do |*args|
  out = IO.popen([gobench, *args], &:read)
  abort "gobench #{args.join(" ")} failed" unless $?.success?
  out.strip
end
go_p50 = ->(line) { line[/p50_ms=([\d.]+)/, 1].to_f }
load_avg = -> { File.read("/proc/loadavg").split.first }

# 1. One eval with one tool call.
embedded = Glovebox::Sandbox.new(tools: adder_class.new)
time_evals.call(embedded, 50) # the child started, its VMs warm
rounds = 3
ruby_times = []
go_lines = []
rounds.times do
  ruby_times.concat(time_evals.call(embedded, n / rounds))
  go_lines << go_line.call("-inprocess", "-n", (n / rounds).to_s)
end
go_inproc = p50.call(go_lines.map { go_p50.call(_1) })
puts "eval with one tool call, add(20, 22) (#{n} evals each, #{rounds} alternating rounds, load #{load_avg.call}):"
printf("  ruby embedded         p50_ms=%.3f mean_ms=%.3f\n", p50.call(ruby_times), mean.call(ruby_times))
printf("  go in-process         p50_ms=%.3f (the rounds' p50s: %s)  embedded/in-process = %.2fx\n",
       go_inproc, go_lines.map { go_p50.call(_1) }.join(", "), p50.call(ruby_times) / go_inproc)

ex = ExecutorHarness.executor
remote = Glovebox::Sandbox.new(tools: adder_class.new, client: ex.client)
time_evals.call(remote, 20)
remote_times = time_evals.call(remote, n / 2)
go_remote = go_line.call("-url", ex.url, "-token", ex.token, "-ca", ex.ca_file, "-n", (n / 2).to_s)
printf("  ruby executor         p50_ms=%.3f mean_ms=%.3f  embedded/executor = %.2fx\n",
       p50.call(remote_times), mean.call(remote_times), p50.call(ruby_times) / p50.call(remote_times))
puts "  go executor           #{go_remote.sub(/\Ago /, "")}"

# 2. A new process to its first result.
first_result = lambda do |script, env = {}|
  times = procs.times.map do
    t0 = now.call
    out = IO.popen(env.merge("GLOVEBOX_BIN" => ENV.fetch("GLOVEBOX_BIN")), [RbConfig.ruby, "-I", lib, "-e", script],
                   err: File::NULL, &:read)
    abort "first-result script failed: #{out}" unless $?.success? && out =~ /\A[\d.]+\z/
    (out.to_f - t0) * 1000
  end
  format("median %5.0f ms  (min %.0f, max %.0f)", p50.call(times), times.min, times.max)
end
clock = "print Process.clock_gettime(Process::CLOCK_MONOTONIC)"
puts "a new Ruby process to its first result, warm cache (#{procs} processes each, load #{load_avg.call}):"
puts "  ruby -e (no gem)          #{first_result.call(clock)}"
puts "  embedded                  #{first_result.call(%(require "glovebox"; Glovebox::Sandbox.new.eval("1 + 1").value == 2 or exit 1; #{clock}))}"
remote_script = %(require "glovebox"; Glovebox::Sandbox.new(executor: ENV["U"], token: ENV["T"], ca_file: ENV["C"]) ) +
                %(.eval("1 + 1").value == 2 or exit 1; #{clock})
puts "  through the executor      #{first_result.call(remote_script, { "U" => ex.url, "T" => ex.token, "C" => ex.ca_file })}"

# 3. Evals per second from several threads.
puts "evals/s, add(20, 22), #{seconds} s each (load #{load_avg.call}):"
[1, 2, 4].each do |k|
  boxes = k.times.map { Glovebox::Sandbox.new(tools: adder_class.new).tap { _1.eval("add(1, 2)") } }
  count = 0
  lock = Mutex.new
  stop = false
  t0 = now.call
  threads = boxes.map do |sb|
    Thread.new do
      c = 0
      until stop
        sb.eval("add(20, 22)").value == 42 || abort("bad value")
        c += 1
      end
      lock.synchronize { count += c }
    end
  end
  sleep seconds
  stop = true
  threads.each(&:join)
  rate = count / (now.call - t0)
  go = go_line.call("-inprocess", "-workers", k.to_s, "-seconds", seconds.to_s)[/evals_per_s=(\d+)/, 1].to_f
  printf("  %d thread%s  ruby embedded %6.0f   go in-process %6.0f   embedded/in-process = %.2fx\n",
         k, k == 1 ? " " : "s", rate, go, rate / go)
end
ex.stop
FileUtils.rm_rf(tmp)
