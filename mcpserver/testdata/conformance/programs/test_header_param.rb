"region: #{ARGS["region"]}"
