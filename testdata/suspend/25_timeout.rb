require "timeout"
Timeout.timeout(5) { double(4) }
