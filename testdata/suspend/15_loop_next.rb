e = [1, 2, 3].each
s = 0
loop { s += double(e.next) }
s
