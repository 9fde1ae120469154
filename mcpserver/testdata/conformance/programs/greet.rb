"Hello, #{ARGS["name"]}!"
