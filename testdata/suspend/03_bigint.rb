double(2**100) + 1
