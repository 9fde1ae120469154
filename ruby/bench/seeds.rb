# frozen_string_literal: true

# What the seeds' spellings cost, each beside glovebox's own in one run
# (docs/ruby.md, "Coming from ..."; RATIONALE.md, "Why do the seeds'
# spellings wrap the guest's code ..."): p50 and p90 of N evals, three
# rounds, embedded.
#
# - a bare Sandbox#eval of 1+1, and the same through Glovebox.spawn (the
#   wrapper around the code);
# - one tool call as a plain function, and as SB.call (compiling SB in the
#   fresh VM);
# - Enclave#eval of 1+1 (a session; the value kept in _).
#
#   GLOVEBOX_BIN=path ruby -Ilib bench/seeds.rb [N]      (from ruby/)
require "glovebox/enclave"

n = Integer(ARGV[0] || 300)
timed = lambda do |&fn|
  a = Array.new(n) do
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    fn.call
    Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
  end.sort
  [a[n / 2], a[(n * 0.9).floor]]
end
adder = Class.new { def add(a, b) = a + b }
plain = Glovebox::Sandbox.new(tools: adder.new)
spawned = Glovebox.spawn(rpcs: { "add" => ->(a) { a["a"] + a["b"] } })
enclave = Enclave.new(tools: adder.new)
rows = {
  "Sandbox#eval 1+1" => -> { plain.eval("1+1") },
  "Glovebox.spawn#eval 1+1 (wrapped)" => -> { spawned.eval("1+1") },
  "Sandbox#eval add(1, 2)" => -> { plain.eval("add(1, 2)") },
  "spawned SB.call(\"add\", a: 1, b: 2)" => -> { spawned.eval('SB.call("add", a: 1, b: 2)') },
  "Enclave#eval 1+1 (session, _ kept)" => -> { enclave.eval("1+1") },
}
rows.each_value(&:call) # each config registered, each engine warm
puts "load: #{File.read("/proc/loadavg").split.first(3).join(" ")}" if File.exist?("/proc/loadavg")
3.times do |round|
  rows.each do |name, fn|
    p50, p90 = timed.call(&fn)
    puts format("round %d  %-38s p50 %7.3f ms  p90 %7.3f ms", round, name, p50 * 1000, p90 * 1000)
  end
end
enclave.close
