#!/usr/bin/env bash
# The marker names a live process that is not the pane's.
sleep 300 &
printf 'running:%s' "$!" >"$1/outcome.tmp" && mv -f "$1/outcome.tmp" "$1/outcome"
wait
