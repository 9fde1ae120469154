# frozen_string_literal: true

# The gem's benchmark: an eval with one tool call (add(20, 22), answered
# by the caller) from Ruby through a local executor, beside the same eval
# from Go (ruby/internal/gobench) through the same executor, in one run.
#
#   ruby -Ilib bench/bench.rb [N]        (from ruby/; make bench-ruby)
#
# GLOVEBOX_BIN names the glovebox binary (else it is built).
require_relative "../test/executor_harness"

n = Integer(ARGV[0] || 200)
ex = ExecutorHarness.executor
gobench = File.join(ex.dir, "gobench")
system("go", "build", "-o", gobench, "./ruby/internal/gobench", chdir: ExecutorHarness::ROOT) || abort("go build gobench failed")

adder = Class.new { def add(x, y) = x + y }.new
sb = Glovebox::Sandbox.new(tools: adder, client: ex.client)
times = (n + 20).times.map do
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  r = sb.eval("add(20, 22)")
  abort "ruby: #{r.status} #{r.value.inspect}" unless r.value == 42
  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
end.drop(20).sort
go = IO.popen([gobench, "-url", ex.url, "-token", ex.token, "-ca", ex.ca_file, "-n", n.to_s], &:read)
abort "gobench failed" unless $?.success?

load = File.read("/proc/loadavg").split.first rescue "?"
puts "eval with one tool call through a local executor (loopback TLS, #{n} evals each, load #{load}):"
printf("  ruby n=%d p50_ms=%.2f mean_ms=%.2f\n", times.size, times[times.size / 2], times.sum / times.size)
puts "  #{go}"
ex.stop
