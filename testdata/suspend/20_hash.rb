h = {}
%w[a b c].each { h[_1] = lookup(_1) }
h
