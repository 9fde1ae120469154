# Float matrix multiply: two n-by-n matrices of Floats (arrays of rows),
# multiplied by rows of the first and rows of the second's transpose; the
# result is the product's middle element.
def mm_gen(n, seed)
  tmp = 1.0 / n / n
  Array.new(n) { |i| Array.new(n) { |j| tmp * (i - j) * (i + j) * seed } }
end

def mm_mul(a, b)
  m = b[0].size
  p = b.size
  bt = Array.new(m) { |j| Array.new(p) { |k| b[k][j] } }
  a.map do |ai|
    bt.map do |bj|
      s = 0.0
      k = 0
      while k < p
        s += ai[k] * bj[k]
        k += 1
      end
      s
    end
  end
end

def bench(n)
  c = mm_mul(mm_gen(n, 1.0), mm_gen(n, 2.0))
  c[n / 2][n / 2].round(9)
end
