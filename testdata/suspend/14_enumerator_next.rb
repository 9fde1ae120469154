e = Enumerator.new do |y|
  y << double(1)
  y << double(2)
  y << lookup("a")
end
[e.next, e.next, e.next]
