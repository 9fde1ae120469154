# A runaway loop is stopped by the wall-clock limit (2 s in the demo).
loop { }
