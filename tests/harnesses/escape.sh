#!/usr/bin/env bash
# An agent that tries to get out of its sandbox (tests/test_sandbox.py). The
# prompt (the last argument) names the attempt. It leaves `ran` in its cwd
# first of all, and what each try got in `tried`, one `WHAT rc=N` line each
# (rc 0: the try worked), both in the cwd, the one place it may write. The
# test gives it what it needs to know in files of the cwd (`pids`, `target`)
# and in its environment (OK_PORT, BAD_PORT); `go` in the cwd ends a wait.
attempt=${!#}
: >ran
tried() {
    printf '%s rc=%s\n' "$1" "$2" >>tried
}
wait_for() {
    while [ ! -e "$1" ]; do sleep 0.05; done
}
# As root in a sandbox that kept its capabilities, mounts would undo it:
# the one that hides a path taken off, the read-only one made writable.
uncover() {
    umount -l "$1" 2>/dev/null
}
unlock() {
    mount -o remount,bind,rw / 2>/dev/null
}
case $attempt in
bashrc)
    printf 'echo escaped\n' 2>/dev/null >>"$HOME/.bashrc"
    tried append $?
    unlock && printf 'echo escaped\n' 2>/dev/null >>"$HOME/.bashrc"
    tried remount $?
    ;;
ssh)
    cat -- "$HOME/.ssh/id_rsa" >>seen 2>/dev/null
    tried read $?
    uncover "$HOME/.ssh" && cat -- "$HOME/.ssh/id_rsa" >>seen 2>/dev/null
    tried uncover $?
    ;;
marker)
    printf 'exit:0' 2>/dev/null >"$SPEXSUP_TURN_DIR/outcome"
    tried outcome $?
    printf 'exit:0:cas:0' 2>/dev/null >"$SPEXSUP_TURN_DIR/outcome.tmp" &&
        mv -f "$SPEXSUP_TURN_DIR/outcome.tmp" "$SPEXSUP_TURN_DIR/outcome" 2>/dev/null
    tried rename $?
    uncover "$SPEXSUP_HOME" && unlock && printf 'exit:0' 2>/dev/null >"$SPEXSUP_TURN_DIR/outcome"
    tried uncover $?
    exit 3
    ;;
statedb)
    printf 'SPEX-ESCAPED' 2>/dev/null >>"$SPEXSUP_HOME/state.db"
    tried append $?
    uncover "$SPEXSUP_HOME" && unlock && printf 'SPEX-ESCAPED' 2>/dev/null >>"$SPEXSUP_HOME/state.db"
    tried uncover $?
    ;;
tmux)
    # `target` holds the other session's name and its pane's terminal.
    { read -r other && read -r tty; } <target
    keys="echo SPEX-INJECTED"
    tmux -L "$SPEXSUP_TMUX" send-keys -t "=$other:" "$keys" Enter 2>/dev/null
    tried socket-name $?
    tmux -S "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$SPEXSUP_TMUX" send-keys -t "=$other:" "$keys" Enter \
        2>/dev/null
    tried socket-path $?
    printf '%s\n' "$keys" 2>/dev/null >"$tty"
    tried tty $?
    ;;
sockets)
    # `target`: LABEL PATH lines, each a Unix socket someone listens on.
    while read -r label path; do
        socat -u OPEN:/dev/null "UNIX-CONNECT:$path" 2>/dev/null
        tried "$label" $?
    done <target
    ;;
kill)
    # `pids`: the wrapper's, then the other session's agent's (host pids).
    wait_for pids
    { read -r wrapper && read -r other; } <pids
    kill -9 "$wrapper" 2>/dev/null
    tried wrapper $?
    kill -9 "$other" 2>/dev/null
    tried other $?
    ;;
net)
    for port in "$OK_PORT" "$BAD_PORT"; do
        body=$(curl -sS --noproxy '*' --max-time 20 "http://127.0.0.1:$port/" 2>/dev/null)
        tried "direct-$port $body" $?
        # Through the sandbox's proxy, when it has one (network allow).
        [ -n "${HTTP_PROXY:-}" ] || continue
        body=$(curl -sS --fail --max-time 20 --noproxy '' --proxy "$HTTP_PROXY" \
            "http://127.0.0.1:$port/" 2>/dev/null)
        tried "proxy-$port $body" $?
    done
    # A request whose host is no host: what the gate records of it is no flag
    # the agent wrote (a line of its own, a terminal escape).
    if [ -n "${HTTP_PROXY:-}" ]; then
        reply=$({
            exec 3<>/dev/tcp/127.0.0.1/3128 &&
                printf 'GET http://x\033[31m\nforged/ HTTP/1.1\r\nHost: x\r\n\r\n' >&3 &&
                head -c 12 <&3
        } 2>/dev/null)
        tried "malformed ${reply#HTTP/1.1 }" 0
    fi
    ;;
daemon)
    # In a session of its own, with no environment to be found by.
    setsid env -i bash -c 'exec -a "spex-daemon-$1" sleep 1000' daemon "$SPEXSUP_TURN" \
        </dev/null >/dev/null 2>&1 &
    printf '%s\n' "$!" >daemon.pid
    wait_for go
    ;;
hidden)
    # Its cwd is in a directory the policy hides: the cwd shows, the rest not.
    cat -- ../secret >/dev/null 2>&1
    tried read $?
    : 2>/dev/null >../planted
    tried write $?
    ;;
where)
    # Where it runs: its PID namespace, and whether it may read a secret.
    tried "pid-ns $(readlink /proc/self/ns/pid)" 0
    cat -- "$HOME/.ssh/id_rsa" >/dev/null 2>&1
    tried read $?
    ;;
*)
    echo "escape.sh: no attempt $attempt" >&2
    exit 2
    ;;
esac
exit 0
