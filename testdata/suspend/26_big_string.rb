s = "x" * 100_000
s << lookup("a")
s.size
