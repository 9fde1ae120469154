# Plain Ruby: output is captured, the last expression is the result.
puts "Hello from Ruby #{RUBY_VERSION} inside WebAssembly"
{ "primes" => (2..30).select { |n| (2..Math.sqrt(n)).none? { |d| (n % d).zero? } }, "big" => 2**100 }
