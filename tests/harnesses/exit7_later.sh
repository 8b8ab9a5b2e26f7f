#!/usr/bin/env bash
# exit7.sh, a moment after it starts: a turn that fails once its wake confirms.
sleep "${EXIT7_AFTER:-1}"
exec "$(dirname "$0")/exit7.sh" "$@"
