# Prints "still" when /session/heartbeat exists and is not written for 1.5 s (the hydra's tree is
# gone); otherwise "written" and the two modification times.
a=$(stat -c %y /session/heartbeat); sleep 1.5; b=$(stat -c %y /session/heartbeat)
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo still; else echo "written $a $b"; fi
