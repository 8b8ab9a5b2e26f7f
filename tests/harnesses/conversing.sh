#!/usr/bin/env bash
# An agent with a conversation: `conversing.sh [--resume ID] PROMPT` prints
# its conversation id (a new one, or the one resumed) and works for a while.
id="demo-$(printf '%08x' $((RANDOM * RANDOM)))"
if [ "$1" = "--resume" ]; then id=$2; shift 2; fi
echo "conversation: $id"
echo "prompt: $1"
sleep "${CONVERSING_SECONDS:-300}"
