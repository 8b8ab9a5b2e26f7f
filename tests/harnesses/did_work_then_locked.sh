#!/usr/bin/env bash
# Did real work (a conversation id, edits), then hit a lock: not retryable.
echo "$1" >>"$RUN_LOG"
echo "conversation: demo-0123abcd"
echo "edited 3 files"
echo "Error: database is locked"
exit 1
