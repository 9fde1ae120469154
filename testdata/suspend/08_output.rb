puts "before"
$stderr.puts "warn before"
x = double(21)
print "after ", x, "\n"
$stderr.puts "warn after"
x
