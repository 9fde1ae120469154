seconds = ARGS.fetch("seconds", 1)
sleep seconds
"#{ARGS["label"] || "slow_compute"}: computed after #{seconds} s"
