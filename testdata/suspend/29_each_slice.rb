rows(10).each_slice(3).map { |sl| double(sl.size) }
