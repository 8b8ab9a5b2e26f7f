#!/usr/bin/env bash
# Ignores SIGHUP (outlives its wrapper and a killed tmux server) but not TERM.
trap '' HUP
echo "hangup-proof: started"
exec sleep 306
