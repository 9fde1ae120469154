t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
sleep 0.2
x = double(1)
t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
[x, t1 - t0 >= 0.2]
