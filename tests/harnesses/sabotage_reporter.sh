#!/usr/bin/env bash
# Removes the exit reporter's argv so the reporter cannot run (cas != 0).
rm -f "$SPEXSUP_TURN_DIR/reporter"
echo "sabotaged"
exit 7
