srand(42)
a = rand(1000)
b = double(a)
[a, b, rand(1000), Random.rand(50)]
