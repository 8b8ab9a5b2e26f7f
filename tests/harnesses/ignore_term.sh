#!/usr/bin/env bash
# Ignores SIGTERM, with a child that ignores it too and one that left the
# tree with setsid (still tagged with SPEXSUP_TURN in its environment).
trap '' TERM
bash -c "trap '' TERM; exec sleep 301" &
setsid sleep 302 &
echo "stubborn: started"
while :; do sleep 0.1; done
