#!/usr/bin/env bash
# Works until the file $GO exists, then exits with $RC (default 0).
while [ ! -e "$GO" ]; do sleep 0.05; done
exit "${RC:-0}"
