#!/usr/bin/env bash
# Example maintenance script: upgrade an agent CLI while the sessions that use
# it are stopped, then resume them. Run it under a lease that grants exactly
# these operations, e.g.:
#
#   spex maint --stop api --stop web --resume api --resume web -- \
#       contrib/maint-upgrade.sh api web
#
# By default this is a DRY RUN: it prints each step (the stops, the upgrade
# command, the resumes) and changes nothing. To really do it, pass --run
# first or set UPGRADE_RUN=1:
#
#   spex maint ... -- contrib/maint-upgrade.sh --run api web
#
# The upgrade command is UPGRADE_COMMAND (run with bash -c), by default
# `npm install -g @anthropic-ai/claude-code@latest`.
#
# Inside the lease nobody else can wake, stop, resume or remove api and web;
# this script can do only what the plan grants, each operation once.
set -euo pipefail

run=${UPGRADE_RUN:-0}
if [ "${1:-}" = "--run" ]; then
    run=1
    shift
fi
if [ "${SPEXSUP_MAINTENANCE_BROKER_FDS:-}" != "3,4,5" ]; then
    echo "run me under spex maint (see the header)" >&2
    exit 2
fi
if [ "$#" -eq 0 ]; then
    echo "usage: maint-upgrade.sh [--run] SESSION..." >&2
    exit 2
fi
upgrade=${UPGRADE_COMMAND:-npm install -g @anthropic-ai/claude-code@latest}

step() {
    if [ "$run" = 1 ]; then
        "$@"
    else
        printf 'would run: %s\n' "$*"
    fi
}

sessions=("$@")
for s in "${sessions[@]}"; do
    step spex maint-op stop "$s"
done

# The upgrade itself: set UPGRADE_COMMAND to what your maintenance needs.
step bash -c "$upgrade"

for s in "${sessions[@]}"; do
    step spex maint-op resume "$s"
done
if [ "$run" != 1 ]; then
    echo "dry run: nothing was changed (pass --run or set UPGRADE_RUN=1 to do it)"
fi
