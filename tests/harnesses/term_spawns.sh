#!/usr/bin/env bash
# Its TERM trap spawns a child before exiting: a stop must rescan after TERM.
trap 'sleep 304 & exit 0' TERM
echo "spawner: started"
while :; do sleep 0.1; done
