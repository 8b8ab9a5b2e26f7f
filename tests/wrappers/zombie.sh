#!/usr/bin/env bash
# The marker names a child that exits and is never reaped (sleep does not
# wait for children): a zombie.
( sleep 0.3; printf 'running:%s' "$BASHPID" >"$1/outcome.tmp" && mv -f "$1/outcome.tmp" "$1/outcome" ) &
exec sleep 300
