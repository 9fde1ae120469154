Point = Struct.new(:x, :y)
p1 = Point.new(double(1), 2)
p1.y = double(p1.x)
p1.to_a
