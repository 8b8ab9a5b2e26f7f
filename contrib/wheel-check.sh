#!/usr/bin/env bash
# Does the built wheel work on its own? Install it into a fresh venv outside
# the checkout and run one wake -> wait on the demo harness from elsewhere.
#   contrib/wheel-check.sh dist/spexsup-*.whl
set -euo pipefail
wheel=$(realpath "$1")
work=$(mktemp -d)
socket="wheel-check-$$"
trap 'tmux -L "$socket" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"
cd "$work"
mkdir -p "$work/state"
export SPEXSUP_HOME="$work/state" SPEXSUP_TMUX="$socket" PATH="$work/venv/bin:$PATH"
# The panes' shells start bare: killed with the server at the end, a shell
# running the machine's rc files (pyenv's init takes a lock to rehash) could
# leave their locks behind for every later login shell of this user.
mkdir -p "$work/home"
export HOME="$work/home" SHELL=/bin/sh
spex="$work/venv/bin/spex"
"$spex" --version
"$spex" new w --harness demo --cwd "$work"
"$spex" wake w "hello from the wheel"
"$spex" wait w --timeout 60
"$spex" log w | tail -n 3
"$spex" ls
echo "wheel check: ok"
