#!/usr/bin/env bash
# A plain-text POST (ntfy-style) for a spex event: NTFY_URL is the topic URL,
# e.g. https://ntfy.sh/my-private-topic. (For a JSON POST of the whole event,
# use `url = "…"` in the [[hook]] table instead of a script.)
#   [[hook]]
#   on = ["failed", "lost"]
#   run = ["env", "NTFY_URL=https://ntfy.sh/my-topic", "/path/to/contrib/hooks/ntfy.sh"]
: "${NTFY_URL:?set NTFY_URL to the topic URL}"
curl -fsS --max-time 5 -H "Title: spex: $SPEX_SESSION $SPEX_EVENT" \
  -d "${SPEX_CAUSE:-${SPEX_SUMMARY:-rc=$SPEX_RC}}" "$NTFY_URL"
