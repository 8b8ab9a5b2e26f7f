#!/usr/bin/env bash
# The stress run's agent. Its prompt (last argument) says what to do:
# "SECONDS RC" sleeps that long and exits with that rc.
read -r seconds rc <<<"${!#}"
echo "stress agent: sleeping $seconds, then rc=$rc"
sleep "$seconds"
exit "$rc"
