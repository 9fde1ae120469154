tries = 0
begin
  tries += 1
  boom("try #{tries}") if tries < 3
  lookup("a")
rescue Glovebox::Boom
  retry
end
