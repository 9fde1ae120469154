def f(n) = n == 0 ? double(21) : f(n - 1) + 1
f(3000)
