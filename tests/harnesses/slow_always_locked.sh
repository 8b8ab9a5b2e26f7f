#!/usr/bin/env bash
# always_locked.sh, a moment after it starts.
sleep 0.5
exec "$(dirname "$0")/always_locked.sh" "$@"
