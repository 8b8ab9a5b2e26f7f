#!/usr/bin/env bash
# A desktop notification for a spex event, where notify-send exists.
#   [[hook]]
#   on = ["completed", "failed", "lost"]
#   run = ["/path/to/contrib/hooks/notify-desktop.sh"]
# spex fills SPEX_EVENT, SPEX_SESSION, SPEX_RC, SPEX_ERROR, SPEX_SUMMARY.
command -v notify-send >/dev/null || { echo "notify-send not found; skipped"; exit 0; }
urgency=normal
case "$SPEX_EVENT" in failed|lost|interrupted|timed-out) urgency=critical ;; esac
notify-send --app-name=spex --urgency="$urgency" \
  "spex: $SPEX_SESSION $SPEX_EVENT${SPEX_RC:+ rc=$SPEX_RC}" \
  "${SPEX_ERROR:-$SPEX_SUMMARY}"
