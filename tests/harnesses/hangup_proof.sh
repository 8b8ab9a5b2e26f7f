#!/usr/bin/env bash
# Ignores SIGHUP and SIGTERM: outlives its wrapper, a killed tmux server and a
# polite stop, until SIGKILL. Creates $STARTED once it ignores them both.
trap '' HUP TERM
touch "$STARTED"
exec sleep 309
