("\xff\xfe".b.bytes.sum + double(3)).to_s(16)
