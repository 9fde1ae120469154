r = Random.new(3)
x = r.rand
echo(x)
[x, r.rand, r.bytes(4).unpack("N")]
