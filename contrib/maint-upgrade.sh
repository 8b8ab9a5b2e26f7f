#!/usr/bin/env bash
# Example maintenance script: upgrade an agent CLI while the sessions that use
# it are stopped, then resume them. Run it under a lease that grants exactly
# these operations, e.g.:
#
#   spex maint --stop api --stop web --resume api --resume web -- \
#       contrib/maint-upgrade.sh api web
#
# Inside the lease nobody else can wake, stop, resume or remove api and web;
# this script can do only what the plan grants, each operation once.
set -euo pipefail

if [ "${SPEXSUP_MAINTENANCE_BROKER_FDS:-}" != "3,4,5" ]; then
    echo "run me under spex maint (see the header)" >&2
    exit 2
fi

sessions=("$@")
for s in "${sessions[@]}"; do
    spex maint-op stop "$s"
done

# The upgrade itself: replace with what your maintenance needs.
${UPGRADE_COMMAND:-npm install -g @anthropic-ai/claude-code@latest}

for s in "${sessions[@]}"; do
    spex maint-op resume "$s"
done
