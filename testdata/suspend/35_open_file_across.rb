f = File.open("/tmp/c.txt", "w+")
f.write("one ")
f.write(lookup("a"))
f.rewind
r = f.read
f.close
r
