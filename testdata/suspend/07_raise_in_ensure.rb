log = []
begin
  begin
    raise ArgumentError, "inner"
  ensure
    log << lookup("c")
  end
rescue ArgumentError => e
  log << e.message << double(4)
end
log
