# mandelbrot: which points of an n-by-n grid over [-1.5, 0.5] x [-1, 1]
# stay within radius 2 for 50 iterations of z = z^2 + c; the result is a
# checksum of the bitmap's rows.
def bench(size)
  sum = 0
  size.times do |y|
    ci = 2.0 * y / size - 1.0
    row = 0
    size.times do |x|
      cr = 2.0 * x / size - 1.5
      zr = zi = 0.0
      i = 0
      while i < 50
        tr = zr * zr - zi * zi + cr
        zi = 2.0 * zr * zi + ci
        zr = tr
        break if zr * zr + zi * zi > 4.0
        i += 1
      end
      row = (row * 2 + (i == 50 ? 1 : 0)) % 1_000_003
    end
    sum = (sum * 31 + row) % 1_000_000_007
  end
  sum
end
