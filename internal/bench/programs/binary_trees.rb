# binary-trees: allocate and walk perfect binary trees of many depths
# (the Computer Language Benchmarks Game's task), nodes as two-element
# arrays.
def bt_make(depth)
  depth.zero? ? [nil, nil] : [bt_make(depth - 1), bt_make(depth - 1)]
end

def bt_check(node)
  left, right = node
  left ? 1 + bt_check(left) + bt_check(right) : 1
end

def bench(max_depth)
  min_depth = 4
  max_depth = [min_depth + 2, max_depth].max
  sum = bt_check(bt_make(max_depth + 1))
  long_lived = bt_make(max_depth)
  min_depth.step(max_depth, 2) do |depth|
    iterations = 1 << (max_depth - depth + min_depth)
    iterations.times { sum += bt_check(bt_make(depth)) }
  end
  sum + bt_check(long_lived)
end
