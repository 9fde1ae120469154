def walk(x) = x.is_a?(Array) ? x.map { walk(_1) } : double(x)
a = 1
150.times { a = [a] }
walk(a).flatten
