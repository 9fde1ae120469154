# spectral-norm: the largest singular value of the infinite matrix
# A(i, j) = 1 / ((i + j)(i + j + 1) / 2 + i + 1), by ten power
# iterations of A-transpose times A on an n-vector.
def sn_a(i, j)
  1.0 / ((i + j) * (i + j + 1) / 2 + i + 1)
end

def sn_times(v, transpose)
  n = v.size
  Array.new(n) do |i|
    s = 0.0
    j = 0
    while j < n
      s += (transpose ? sn_a(j, i) : sn_a(i, j)) * v[j]
      j += 1
    end
    s
  end
end

def sn_ata(v) = sn_times(sn_times(v, false), true)

def bench(n)
  u = Array.new(n, 1.0)
  v = nil
  10.times do
    v = sn_ata(u)
    u = sn_ata(v)
  end
  vbv = vv = 0.0
  n.times do |i|
    vbv += u[i] * v[i]
    vv += v[i] * v[i]
  end
  Math.sqrt(vbv / vv).round(9)
end
