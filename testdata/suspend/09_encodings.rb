s = shout("héllo wörld ✓")
[s, s.encoding.name, shout("日本語").bytesize, "é".encode("ISO-8859-1").bytes]
