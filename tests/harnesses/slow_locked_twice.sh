#!/usr/bin/env bash
# Like locked_twice.sh, but each attempt takes a moment to fail.
sleep 0.5
exec "$(dirname "$0")/locked_twice.sh" "$@"
