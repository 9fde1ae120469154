(1..20).map { double(_1) }.sum
