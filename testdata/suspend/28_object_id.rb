o = Object.new
id = o.object_id
echo(1)
[o.object_id == id, o.frozen?]
