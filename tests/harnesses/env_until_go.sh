#!/usr/bin/env bash
# Leaves its environment in $DUMP (env -0, written atomically), then works
# until the file $GO exists, like until_go.sh.
env -0 >"$DUMP.tmp" && mv -f "$DUMP.tmp" "$DUMP"
exec "$(dirname "$0")/until_go.sh"
