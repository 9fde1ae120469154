trap '' TERM HUP
( setsid sh -c 'trap "" TERM HUP; sleep 1000' & )
( sh -c 'sleep 1001 & ' & )
nohup sleep 1002 >/dev/null 2>&1 &
sleep 1003
