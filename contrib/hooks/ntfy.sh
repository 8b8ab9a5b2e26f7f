#!/usr/bin/env bash
# A plain-text POST (ntfy-style) for a spex event: NTFY_URL is the topic URL,
# e.g. https://ntfy.sh/my-private-topic. (For a JSON POST of the whole event,
# use `url = "…"` in the [[hook]] table instead of a script.)
#   [[hook]]
#   on = ["failed", "lost"]
#   run = ["env", "NTFY_URL=https://ntfy.sh/my-topic", "/path/to/contrib/hooks/ntfy.sh"]
# The URL (a secret) and the message reach curl through a config on a pipe
# and stdin, never its argv, which every local user can read.
: "${NTFY_URL:?set NTFY_URL to the topic URL}"
quoted() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
printf '%s' "${SPEX_ERROR:-${SPEX_SUMMARY:-rc=$SPEX_RC}}" |
  curl -fsS --max-time 5 --data-binary @- -K <(
    printf 'url = %s\nheader = %s\n' "$(quoted "$NTFY_URL")" \
      "$(quoted "Title: spex: $SPEX_SESSION $SPEX_EVENT")"
  )
