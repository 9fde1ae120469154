File.write("/tmp/a.txt", "hi")
f = File.open("/tmp/b.txt", "w")
f.write(double(2))
f.close
x = double(3)
[File.read("/tmp/a.txt"), File.read("/tmp/b.txt"), x, Dir.children("/tmp").sort]
