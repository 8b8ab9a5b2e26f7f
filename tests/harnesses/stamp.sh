#!/usr/bin/env bash
# Appends when it started (epoch seconds, ns) to $STAMP_DIR/$SPEXSUP_SESSION,
# then works for $STAMP_SLEEP seconds (default: none, it completes at once).
date +%s.%N >> "$STAMP_DIR/$SPEXSUP_SESSION"
exec sleep "${STAMP_SLEEP:-0}"
