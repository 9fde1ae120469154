# Loops of many lengths inside Timeout.timeout before each pause: its
# trace hook reads the clock every 64 events, so the pauses fall at every
# phase of that count (the flush after a pause must not read it again).
require "timeout"
Timeout.timeout(30) do
  [1, 3, 17, 29, 41, 53, 64, 100, 1000].map do |n|
    s = 0
    n.times { |i| s += i }
    double(s)
  end
end
