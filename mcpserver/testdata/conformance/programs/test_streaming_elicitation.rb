"answered without asking the client anything"
