f = Fiber.new do
  a = double(1)
  Fiber.yield a
  double(a + 1)
end
[f.resume, f.resume]
