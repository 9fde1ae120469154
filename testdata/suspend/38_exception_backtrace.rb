def inner = boom("deep")
def outer = inner
begin
  outer
rescue => e
  [e.class.name, e.message, e.backtrace.first]
end
