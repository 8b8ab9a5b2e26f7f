#!/usr/bin/env bash
# The real wrapper, slow in its last steps (as on a loaded machine): after
# its final marker it pauses before it hands the pane back to a shell.
source <(sed 's/^unset SPEXSUP_TURN /sleep 1.5; &/' "$(dirname "$0")/../../shell/turn.sh")
