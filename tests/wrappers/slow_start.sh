#!/usr/bin/env bash
# The real wrapper, started only once $SPEXSUP_HOME/go exists: a wrapper that
# tmux has started but that has not written its marker yet.
touch "$SPEXSUP_HOME/go.waiting"
for _ in $(seq 600); do
    [ -e "$SPEXSUP_HOME/go" ] && break
    sleep 0.05
done
exec bash "$(dirname "$0")/../../shell/turn.sh" "$@"
