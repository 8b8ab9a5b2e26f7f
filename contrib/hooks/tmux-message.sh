#!/usr/bin/env bash
# Show a spex event on *your own* tmux clients (`tmux display-message`).
# spex itself never touches your default tmux server: this runs only because
# you put it in a [[hook]] table, and it talks to the server named by
# SPEX_TMUX_SOCKET (a path) if set, else your default one. (Hooks do not
# inherit SPEX_* variables: set it in the argv, as below.)
#   [[hook]]
#   on = ["completed", "failed"]
#   run = ["/path/to/contrib/hooks/tmux-message.sh"]
#   # or: run = ["env", "SPEX_TMUX_SOCKET=/path/to/socket", "/path/to/…/tmux-message.sh"]
unset TMUX TMUX_PANE  # spex drops them too: never its own private server
args=()
[ -n "${SPEX_TMUX_SOCKET:-}" ] && args=(-S "$SPEX_TMUX_SOCKET")
text="spex: $SPEX_SESSION $SPEX_EVENT${SPEX_RC:+ rc=$SPEX_RC}${SPEX_SUMMARY:+: $SPEX_SUMMARY}"
# Every attached client of the user's server, each for 5 s.
tmux "${args[@]}" list-clients -F '#{client_name}' 2>/dev/null | while read -r client; do
  tmux "${args[@]}" display-message -d 5000 -c "$client" "$text"
done
