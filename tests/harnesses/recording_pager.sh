#!/bin/sh
# A pager for tests: notes in $PAGER_RECORD that it ran (and the LESS it was
# given), keeps there what it was fed, and shows it as a pager would.
echo "pager ran LESS=${LESS-unset} args=$*" > "$PAGER_RECORD"
tee -a "$PAGER_RECORD"
