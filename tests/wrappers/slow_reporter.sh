#!/usr/bin/env bash
# The real wrapper with a slow exit reporter (as on a loaded machine): it
# pauses after `reporting:` before it runs the reporter.
source <(sed 's/^mark "reporting:\$pid:\$rc"$/&; sleep 1.5/' "$(dirname "$0")/../../shell/turn.sh")
