LIMIT = double(5)
def scaled(x) = x * LIMIT
class Acc; attr_reader :n; def initialize = @n = 0; def add(x) = @n += x; end
a = Acc.new
3.times { a.add(scaled(double(_1))) }
[a.n, LIMIT]
