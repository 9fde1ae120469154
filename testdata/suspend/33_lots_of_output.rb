100.times { |i| puts "line #{i}" }
double(1)
100.times { |i| puts "more #{i}" }
warn "done"
:ok
