#!/usr/bin/env bash
# The harness "exited" but the reporter never finishes.
printf 'reporting:%s:0' "$$" >"$1/outcome.tmp" && mv -f "$1/outcome.tmp" "$1/outcome"
exec sleep 300
