# fannkuch-redux: for every permutation of 1..n, count the prefix
# reversals until 1 comes first; the checksum alternates signs over the
# permutations in the order the rotations generate them.
def bench(n)
  perm1 = (0...n).to_a
  count = Array.new(n, 0)
  max_flips = 0
  checksum = 0
  sign = 1
  r = n
  loop do
    while r != 1
      count[r - 1] = r
      r -= 1
    end
    perm = perm1.dup
    flips = 0
    k = perm[0]
    while k != 0
      perm[0, k + 1] = perm[0, k + 1].reverse!
      flips += 1
      k = perm[0]
    end
    max_flips = flips if flips > max_flips
    checksum += sign * flips
    sign = -sign
    loop do
      return checksum * 1000 + max_flips if r == n
      p0 = perm1[0]
      i = 0
      while i < r
        perm1[i] = perm1[i + 1]
        i += 1
      end
      perm1[r] = p0
      count[r] -= 1
      break if count[r] > 0
      r += 1
    end
  end
end
