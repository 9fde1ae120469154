"never reached: the client lacks the experimental capability"
