catch(:done) do
  10.times { |i| throw :done, i if double(i) > 6 }
  :never
end
