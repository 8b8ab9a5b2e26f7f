#!/usr/bin/env bash
# A fake agent that does work: appends its prompt (the last argument) and
# its session's name as a line of work.txt in its cwd, then exits $EDIT_RC
# (default 0). Best-of tests tell the legs apart by what each one wrote.
printf '%s\n' "${!#}" >>work.txt
[ -n "${EDIT_SIGN:-}" ] && printf 'by %s\n' "${SPEXSUP_SESSION:-?}" >>work.txt
exit "${EDIT_RC:-0}"
