#!/usr/bin/env bash
# Prints a line, waits for $GO, exits 0 with its exit reporter held until
# $GATE exists: the harness is gone, its end not yet recorded (the wrapper
# reads the reporter's argv again after the harness exits).
set -e
dir=$SPEXSUP_TURN_DIR
mapfile -d '' -t real <"$dir/reporter"
hold=(bash -c 'while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"' "$GATE" "${real[@]}")
printf '%s\0' "${hold[@]}" >"$dir/reporter.new"
mv -f "$dir/reporter.new" "$dir/reporter"
echo "working"
while [ ! -e "$GO" ]; do sleep 0.05; done
echo "done"
