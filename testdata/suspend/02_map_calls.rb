(1..5).map { double(_1) }
