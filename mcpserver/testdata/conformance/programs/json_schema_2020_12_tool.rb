"Contact #{ARGS["name"]} by #{ARGS["contactMethod"] || "email"}"
