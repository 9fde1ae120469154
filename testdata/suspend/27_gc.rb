x = double(1)
GC.start
junk = Array.new(10_000) { "s#{_1}" }
y = double(junk.size)
GC.start
[x, y, junk.last]
