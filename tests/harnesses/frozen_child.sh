#!/bin/bash
# Starts a child and names it in $CHILD_PID for the test to freeze (cgroup
# freezer): a frozen process outlives SIGKILL until it is thawed.
sleep 300 </dev/null >/dev/null 2>&1 &
echo $! >"$CHILD_PID.tmp" && mv -f "$CHILD_PID.tmp" "$CHILD_PID"
wait
