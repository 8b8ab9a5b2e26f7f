#!/usr/bin/env bash
# The system packages a target needs, installed when missing: the one place
# the Makefile and .ci/run both call, so a fresh machine that runs only the
# README's commands gets what CI gets.
#
#   contrib/system-packages.sh demo|test|real
#
# apt-get when root, `sudo -n apt-get` when that works without a password,
# otherwise one line naming the exact command to run and exit 2 (before any
# test starts: a suite that skips what it cannot run proves nothing).
set -euo pipefail

need=${1:-test}
missing=()

# has PACKAGE CHECK...: PACKAGE is missing unless one CHECK succeeds.
has() {
    local package=$1
    shift
    local check
    for check in "$@"; do
        if eval "$check" >/dev/null 2>&1; then
            return 0
        fi
    done
    missing+=("$package")
}

on_path() { command -v "$1" || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

has tmux "on_path tmux"
has python3-venv "python3 -c 'import venv, ensurepip'"
if [ "$need" = test ] || [ "$need" = real ]; then
    has git "on_path git"                          # worktree sessions and their tests
    has e2fsprogs "on_path chattr"                 # tests make files immutable (root ignores modes)
    has openssh-server "on_path sshd"              # tests/test_hosts.py: a real sshd on 127.0.0.1
    has openssh-client "on_path ssh"
    has zsh "on_path zsh"                          # a zsh user's login environment
    has cron "on_path cron"                        # a schedule fired by Debian's cron daemon
    has systemd "on_path systemd-analyze"          # the rendered timer units are verified
    has chromium "on_path chromium"                # spex serve looked at in a real browser
    has bubblewrap "on_path bwrap"                 # sandboxed sessions' engine
    has socat "on_path socat"                      # the sandbox's bridge to its network gate
fi
if [ "$need" = real ]; then
    has nodejs "on_path node"                      # the real agent CLIs are npm packages
    has npm "on_path npm"
fi

[ ${#missing[@]} -eq 0 ] && exit 0

install=(apt-get install -y -qq "${missing[@]}")
if ! command -v apt-get >/dev/null 2>&1; then
    echo "spexsup: missing system packages: ${missing[*]} (this script knows Debian's names; install them with your package manager)" >&2
    exit 2
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "spexsup: missing system packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" "${install[@]}" >/dev/null
