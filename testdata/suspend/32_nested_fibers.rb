outer = Fiber.new do
  inner = Fiber.new { Fiber.yield double(5); double(6) }
  v = inner.resume
  Fiber.yield v
  [double(v), inner.resume]
end
[outer.resume, outer.resume]
