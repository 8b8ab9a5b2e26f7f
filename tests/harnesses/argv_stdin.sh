#!/usr/bin/env bash
# An agent with a conversation that records how it was run:
# `argv_stdin.sh DIR [--resume ID]`, the prompt on stdin. Writes its argv
# (NUL-separated) and its stdin to DIR/$SPEXSUP_TURN.argv and .stdin, prints
# its conversation id (a new one, or the one resumed) and exits with the
# number in DIR/rc (0 without one).
dir=$1
printf '%s\0' "$@" >"$dir/$SPEXSUP_TURN.argv"
cat >"$dir/$SPEXSUP_TURN.stdin"
id="demo-$(printf '%08x' $((RANDOM * RANDOM)))"
while [ $# -gt 0 ]; do
	if [ "$1" = "--resume" ]; then id=$2; fi
	shift
done
echo "conversation: $id"
exit "$(cat "$dir/rc" 2>/dev/null || echo 0)"
