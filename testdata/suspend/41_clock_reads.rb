# Clock reads, a sleep and a nested timeout before and between pauses.
require "timeout"
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
stamps = []
r = Timeout.timeout(30) do
  20.times { stamps << Time.now }
  sleep 0.01
  a = double(1)
  Timeout.timeout(10) do
    50.times { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    a + double(a)
  end
end
t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
[r, stamps.each_cons(2).all? { |x, y| x <= y }, t1 - t0 >= 0.01]
