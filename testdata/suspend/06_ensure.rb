out = []
begin
  out << lookup("a")
ensure
  out << lookup("b")
end
out
