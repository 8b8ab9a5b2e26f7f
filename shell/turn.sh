#!/usr/bin/env bash
# spexsup turn wrapper (DESIGN §2.4): run one headless turn of a harness in
# the session's pane and record how it ended in the outcome marker.
#
#   bash turn.sh TURN_DIR
#   bash turn.sh --which NAME [SECONDS]   (the path NAME resolves to on the
#        login PATH; exit 1 not found, 126 no login shell)
#   bash turn.sh --login [SECONDS]   (the login shell and flags, whether the
#        answer was cached, how long the shell took, its PATH; exit 124 timed
#        out, 126 no login shell; `spex new` and `spex doctor` use it)
#   bash turn.sh --shell ENV_FILE [SHELL_PATH]   (the pane's shell, with the
#        session's --env)
#
# TURN_DIR holds `argv` (NUL-separated; the prompt is one element, never
# parsed by a shell), `env` (NUL-separated KEY=VALUE), `reporter` (the argv of
# `spex internal turn-exit SESSION TURN`, NUL-separated), `prompt`, and
# `stdin` when the prompt goes on the harness's stdin, and `deadline`
# ("SECONDS GRACE") when the turn has a time limit, and `login` (SECONDS)
# when the harness runs in the environment of the user's login shell.
#
# Marker states, each written atomically (tmp + mv -f):
#   running:<pid>  ->  reporting:<pid>:<rc>  ->  exit:<rc>:cas:<cas>
# the final two followed by :ran:<ms> (this wrapper's own run time) and,
# when output.log could not keep all the harness printed, :lost:<bytes>
# (:lost:? when how much is unknown);
# and, with a verify command after a clean exit, running:<pid> ->
# verifying:<pid> -> reporting:<pid>:0 (the check's rc in verify-rc) -> …
# and, waiting for a usage limit to reset (`on-limit`), running:<pid> ->
# limited:<pid>:<reset_epoch> -> running:<pid> (the resumed run) -> …
# then the pane becomes a shell again.
set -u

# The environment of the user's interactive login shell, as a person at a
# terminal has it (PATH lines that nvm, volta, asdf or fnm put in ~/.bashrc
# after its "interactive only" guard; API keys exported there): the output
# of `env -0` run by `"$SHELL" -ilc`, else by the passwd entry's shell, given
# at most $1 seconds. Sets `login_vars` (KEY=VALUE each, without what must
# stay the pane's own: see `login_keep`), `login_shell` ("/bin/bash -il"),
# `login_ms` (how long the shell took when it ran) and `login_source`
# (cache or shell). Returns 1 when no shell answers, 124 when it timed out.
#
# Run detached from the pane's terminal (setsid, stdin /dev/null): an
# interactive shell, or an rc file that reads /dev/tty or calls stty, would
# otherwise take the terminal's job control and be stopped (SIGTTIN) for good.
# Cached in the state home per shell and rc files (path:mtime:size, through
# a symlink to the file it names: a dotfiles manager's link never changes):
# a login shell can cost from milliseconds to a minute of rc files, a cached
# turn only those stats (the launch's) and a file read.
login_env() {
    local limit=$1 sh=${SHELL:-} key cache="" tmp="" cached_key="" cached_ms="" h=${HOME:-}
    local started rc=0 i found="" rec k lock="" stats
    local -a recs=()
    login_vars=() login_shell="" login_ms="" login_source=""
    if [ -z "$sh" ] || [ ! -x "$sh" ]; then
        sh=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f7)
    fi
    if [ -z "$sh" ] || [ ! -x "$sh" ]; then
        return 1
    fi
    login_shell="$sh -il"
    # The rc files' stats as the launch took them for this HOME a moment ago
    # (`login-stats`: "HOME<TAB>STATS", spexsup.adapters.login.rc_stats),
    # else asked of stat (a subshell and a process: a wave starts many turns).
    stats=""
    if [ -n "${dir:-}" ] && [ -r "$dir/login-stats" ]; then
        IFS= read -r -d '' stats <"$dir/login-stats"
    fi
    if [ "${stats%%$'\t'*}" = "$h" ] && [ "$stats" != "$h" ]; then
        stats=${stats#*$'\t'}
    else
        stats=$(stat -L --printf '%n:%.9Y:%s ' -- /etc/profile /etc/profile.d \
            /etc/bash.bashrc /etc/zsh/zshenv /etc/zsh/zprofile /etc/zsh/zshrc /etc/zsh/zlogin \
            "$h/.profile" "$h/.bash_profile" "$h/.bash_login" "$h/.bashrc" "$h/.bash_aliases" \
            "$h/.zprofile" "$h/.zshenv" "$h/.zshrc" "$h/.zlogin" \
            "$h/.config/fish/config.fish" 2>/dev/null)
    fi
    # env2: the shell starts from the base environment (login.base_env), so
    # a cache an older spex wrote from a client's whole environment is stale.
    key="env2 $login_shell $stats"
    [ -n "${SPEXSUP_HOME:-}" ] && cache=$SPEXSUP_HOME/login-env
    login_cached && return 0
    if [ -n "$cache" ]; then
        # One lookup at a time per home: the legs of a wave that all find the
        # cache stale wait for the first one's answer rather than each run the
        # login shell (a hundred zsh starts at once). Without the lock (no
        # flock, or its wait ran out) the lookup runs anyway.
        # (Braces: a bare `exec` would keep the 2>/dev/null for the whole
        # wrapper, and the pane's shell after the turn with it.)
        if { exec {lock}>>"$cache.lock"; } 2>/dev/null; then
            flock -w "$limit" "$lock" 2>/dev/null
            if login_cached; then
                exec {lock}>&-
                return 0
            fi
        fi
        tmp=$cache.$$
    else
        tmp=$(mktemp) || return 1
    fi
    # rc files may print: the environment is what follows the sentinel. `exec`:
    # no logout file (~/.bash_logout's clear_console) runs after it.
    started=${EPOCHREALTIME//[!0-9]/}
    # (Braces: bash's own "Killed" line, when -k had to, is not for the pane.)
    { setsid -w timeout -k 1 "$limit" "$sh" -ilc 'printf "\n%s\n" @spex-env@; exec env -0' \
        </dev/null >"$tmp" || rc=$?; } 2>/dev/null
    login_ms=$(((${EPOCHREALTIME//[!0-9]/} - started) / 1000))
    mapfile -d '' -t recs <"$tmp"
    rm -f "$tmp"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && login_unlock && return 124
    for i in "${!recs[@]}"; do
        case ${recs[i]} in *$'\n@spex-env@\n'*)
            found=$i
            break
            ;;
        esac
    done
    [ -n "$found" ] || { login_unlock && return 1; }
    recs[found]=${recs[found]##*$'\n@spex-env@\n'}
    for rec in "${recs[@]:found}"; do
        k=${rec%%=*}
        [ "$k" != "$rec" ] && [[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && login_keep "$k" || continue
        login_vars+=("$rec")
    done
    case " ${login_vars[*]%%=*} " in *" PATH "*) ;; *) login_unlock && return 1 ;; esac
    login_source=shell
    if [ -n "$cache" ]; then
        { printf '%s\n%s\n' "$key" "$login_ms" && printf '%s\0' "${login_vars[@]}"; } \
            >"$cache.$$" 2>/dev/null && mv -f "$cache.$$" "$cache"
    fi
    login_unlock
    return 0
}

# The cache's environment when it was written for this shell and these rc
# files (`key`); login_env's locals.
login_cached() {
    [ -n "$cache" ] && [ -r "$cache" ] || return 1
    { IFS= read -r cached_key && IFS= read -r cached_ms && mapfile -d '' -t login_vars; } <"$cache"
    if [ "$cached_key" = "$key" ] && [ ${#login_vars[@]} -gt 0 ]; then
        login_ms=$cached_ms login_source=cache
        return 0
    fi
    login_vars=()
    return 1
}

# The lookup's lock let go (the harness must not inherit it); login_env's local.
login_unlock() {
    [ -n "$lock" ] && exec {lock}>&-
    lock=""
    return 0
}

# Is the login shell's KEY one the turn takes? Not the lookup shell's own
# bookkeeping (PWD, SHLVL, `_`, prompts), not what must stay the pane's
# (TERM, tmux's, the terminal's size) nor spex's own SPEXSUP_* as the launch
# set them, and not bash's read-only ones, which `export` refuses.
login_keep() {
    case $1 in
    PWD | OLDPWD | SHLVL | _ | PS[1-4] | PROMPT_COMMAND | COLUMNS | LINES | TERM | TMUX | \
        TMUX_PANE | TMUX_TMPDIR | SPEXSUP_* | SHELLOPTS | BASHOPTS | BASH_VERSINFO | EUID | \
        UID | PPID | GROUPS)
        return 1
        ;;
    esac
    return 0
}

# The login environment exported into this shell; 126 when there is none.
export_login() {
    local kv
    login_env "$1" || return 126
    for kv in "${login_vars[@]}"; do
        export "${kv?}"
    done
}

# A sandboxed turn's first steps, inside its sandbox (DESIGN §19), before
# the harness: $1 the host's network namespace (empty: network open), $2 its
# PID namespace, $3 a path to fail to write, $4 one to fail to read, then
# the harness's argv. With SPEX_GATE set it first waits for the network
# gate (its `ready` file: the canary port, the loopback ports it serves).
# The probe must fail to write, to read, to share the host's network or
# process namespace and to reach the canary on the host's loopback: what
# got through goes to fd 3 and it exits 125; else fd 3 gets `held`, socat
# bridges loopback ports to the gate's sockets, and the harness runs. One
# bubblewrap start for both: the probe runs in the harness's own sandbox.
sandbox_inside='net_ns=$1 pid_ns=$2 pwrite=$3 pread=$4
shift 4
held="" caps="" c="" my_net="" my_pid="" pause=""
# A capability left (bubblewrap run by root keeps them all) would undo any of
# it by a mount.
while read -r key value; do
    [ "$key" = CapEff: ] && caps=$value
done </proc/self/status
if [ -z "$caps" ]; then
    held="$held; cannot read its capabilities"
elif [ -n "${caps//0/}" ]; then
    held="$held; keeps capabilities $caps"
fi
# Builtins where a process would do (a fork costs a millisecond or more).
{ : >"$pwrite"; } 2>/dev/null && held="$held; wrote $pwrite"
{ IFS= read -r -N 64 c <"$pread"; } 2>/dev/null
[ -n "$c" ] && held="$held; read $pread"
{ IFS= read -r my_net; IFS= read -r my_pid; } < <(readlink /proc/self/ns/net /proc/self/ns/pid)
[ -z "$my_pid" ] && held="$held; cannot read its namespaces"
[ -n "$net_ns" ] && [ "$my_net" = "$net_ns" ] && held="$held; shares the host network"
[ "$my_pid" = "$pid_ns" ] && held="$held; sees the host processes"
bridges="" ports="" canary=""
if [ -z "$held" ] && [ -n "${SPEX_GATE:-}" ]; then
    # A 2 ms pause without a fork: a read that times out on a pipe we hold both ends of.
    exec {pause}<> <(:)
    # The proxy bridge first: socat dials the gate only per connection.
    bridges="3128:proxy.sock"
    socat TCP-LISTEN:3128,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:/tmp/.spex-net/proxy.sock \
        2>/dev/null &
    for ((i = 0; i < 5000; i++)); do
        [ -s /tmp/.spex-net/ready ] && break
        read -r -t 0.002 -u $pause
    done
    if ! read -r canary ports </tmp/.spex-net/ready; then
        echo "the network gate did not start" >&3
        exit 125
    fi
    (exec 5<>"/dev/tcp/127.0.0.1/$canary") 2>/dev/null && held="$held; reached the host loopback"
    for p in $ports; do
        bridges="$bridges $p:port-$p.sock"
        socat "TCP-LISTEN:$p,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:/tmp/.spex-net/port-$p.sock" \
            2>/dev/null &
    done
fi
if [ -n "$held" ]; then
    printf "%s\n" "${held#; }" >&3
    exit 125
fi
echo held >&3
exec 3>&-
# Each bridge listening (/proc/net/tcp) before the harness may dial it.
for b in $bridges; do
    printf -v hex "%04X" "${b%%:*}"
    for ((i = 0; i < 2500; i++)); do
        found=""
        while read -r _ local _ state _; do
            [ "$local" = "0100007F:$hex" ] && [ "$state" = 0A ] && found=1 && break
        done </proc/net/tcp
        [ -n "$found" ] && break
        read -r -t 0.002 -u $pause
    done
done
[ -n "$pause" ] && exec {pause}<&-
unset SPEX_GATE
exec "$@"'

# The arguments of `sandbox_inside` for the sandbox in DIR (`sandbox`,
# NUL-separated, and `sandbox-probe`, its two paths), in `inside_args`.
sandbox_args() {
    local pdir=$1 net="" pidns="" pwrite pread word unshared=""
    local -a words=()
    { IFS= read -r pwrite && IFS= read -r pread; } <"$pdir/sandbox-probe"
    mapfile -d '' -t words <"$pdir/sandbox"
    for word in "${words[@]}"; do
        [ "$word" = --unshare-net ] && unshared=1 && break
    done
    { IFS= read -r net; IFS= read -r pidns; } < <(readlink /proc/$$/ns/net /proc/$$/ns/pid)
    [ -n "$unshared" ] || net=""  # network open: nothing to prove
    inside_args=(/bin/bash -c "$sandbox_inside" sandbox "$net" "$pidns" "$pwrite" "$pread")
    probe_write=$pwrite
}

# `spex doctor`: the probe of the sandbox in DIR, as a turn runs it (with
# `true` for the harness); prints what got through, or the engine's error.
if [ "${1:-}" = "--sandbox-probe" ]; then
    pdir=${2:?usage: turn.sh --sandbox-probe DIR}
    mapfile -d '' -t engine <"$pdir/sandbox"
    sandbox_args "$pdir"
    said=$("${engine[@]}" -- "${inside_args[@]}" true 3>&1 2>&1 </dev/null)
    rc=$?
    rm -f -- "$probe_write" 2>/dev/null
    [ $rc = 0 ] && [ "$said" = held ] && exit 0
    said=${said//$'\n'/; }
    printf '%s\n' "${said:-the probe failed (rc $rc)}"
    exit 1
fi

if [ "${1:-}" = "--which" ]; then
    name=${2:?usage: turn.sh --which NAME [SECONDS]}
    umask 077
    if ! export_login "${3:-10}"; then
        echo "spex: no login shell could be resolved" >&2
        exit 126
    fi
    type -P -- "$name" || exit 1
    exit 0
fi

# What `spex doctor` and `spex new` read: the shell and flags, where the
# answer came from, how long the shell took (ms), then the login PATH.
if [ "${1:-}" = "--login" ]; then
    umask 077
    login_env "${2:-10}"
    rc=$?
    printf 'shell %s\nsource %s\nms %s\n' "$login_shell" "$login_source" "$login_ms"
    if [ $rc = 0 ]; then
        for kv in "${login_vars[@]}"; do
            [ "${kv%%=*}" = PATH ] && printf '%s\n' "$kv"
        done
        exit 0
    fi
    [ $rc = 124 ] && exit 124
    exit 126
fi

# The pane's shell (a new or recreated pane, or one handed back to a shell):
# the session's --env from ENV_FILE (NUL-separated KEY=VALUE, 0600), which
# never goes on a command line (any local user reads those with ps), then
# SHELL_PATH (default $SHELL) as a login shell, the way tmux starts one.
if [ "${1:-}" = "--shell" ]; then
    while IFS= read -r -d '' kv; do
        export "${kv?}"
    done <"${2:?usage: turn.sh --shell ENV_FILE [SHELL_PATH]}"
    exec -l "${3:-${SHELL:-/bin/bash}}"
fi

dir=${1:?usage: turn.sh TURN_DIR}
pid=$$
# The turn's run time is the wrapper's own, from here to its end (`ran:` in
# the final markers): never when a reader came to record the end.
began=${EPOCHREALTIME//[!0-9]/}

# Our files (marker, output.log) are private, 0600; the harness and the shell
# that follows get the user's own umask back. Read from /proc (no subshell:
# a wave starts a hundred wrappers at once), else asked of a subshell.
user_umask=""
while read -r key value; do
    [ "$key" = Umask: ] && user_umask=$value && break
done 2>/dev/null </proc/$$/status
[[ $user_umask =~ ^[0-7]{3,4}$ ]] || user_umask=$(umask)
umask 077

mark_file() {
    printf '%s' "$1" 2>/dev/null >"$dir/outcome.tmp" && mv -f "$dir/outcome.tmp" "$dir/outcome"
}

# The first marker goes straight into a file of its own making (noclobber:
# never over one that is there), without the `mv` process of the others;
# until its one write lands, a reader finds the file empty, which reads as
# no marker yet (spexsup.pane.marker). Else, as every other marker.
mark_first() {
    local made=1
    set -C
    { printf '%s' "$1" >"$dir/outcome"; } 2>/dev/null || made=""
    set +C
    [ -n "$made" ] && return 0
    [ -s "$dir/outcome" ] || rm -f "$dir/outcome"  # ours, left empty by a failed write
    mark_file "$1"
}

# A marker the disk has no room for (it is full) is kept in the tmux server's
# memory, a pane option naming the turn, for the reader that records the end
# once the wrapper is gone (turn.reconcile): a full disk must not lose the rc.
mark() {
    mark_file "$1" && return 0
    rm -f "$dir/outcome.tmp"
    [ -n "${TMUX_PANE:-}" ] &&
        tmux set-option -p -t "$TMUX_PANE" @spex_outcome "${dir##*/} $1" 2>/dev/null
}

if ! mark_first "running:$pid"; then
    echo "spex: cannot write the outcome marker in $dir" >&2
    # The launch said on the status line that the turn runs: it never will.
    [ -n "${TMUX_PANE:-}" ] &&
        tmux set-option -p -t "$TMUX_PANE" @spex_state "turn ${dir##*/} failed to start" 2>/dev/null
    exit 125
fi
turn=${dir##*/}

# The pane's status line shows the turn's state (a pane option).
status() {
    [ -n "${TMUX_PANE:-}" ] && tmux set-option -p -t "$TMUX_PANE" @spex_state "$1" 2>/dev/null
}
# (The launch's tmux call kept the pane's screen in its history and said on
# its status line that the turn runs: no tmux client of ours here, where a
# wave starts a hundred turns at once.)

argv=()
mapfile -d '' -t argv <"$dir/argv"

# The pane's environment overlaid by the login shell's, then the session's
# --env, which wins.
refused=""
if [ -r "$dir/login" ]; then
    read -r login_limit <"$dir/login"
    if ! export_login "$login_limit"; then
        refused="no login shell could be resolved - turn NOT started"
        refused_rc=126
        : >"$dir/no-login-shell"
    fi
fi
while IFS= read -r -d '' kv; do
    export "${kv?}"
done <"$dir/env"
# The harness binary as this PATH resolves it (spex show prints it); a
# missing one is named plainly, never left to a bash error.
if [ -z "$refused" ] && [ ${#argv[@]} -gt 0 ]; then
    # Written by `type` itself (no subshell); asked again only when that
    # failed, which may be the disk's doing rather than PATH's.
    if type -P -- "${argv[0]}" 2>/dev/null >"$dir/binary" || type -P -- "${argv[0]}" >/dev/null; then
        :
    else
        where=" on the login PATH"
        [ -r "$dir/login" ] || where=" on PATH"
        case ${argv[0]} in */*) where="" ;; esac
        refused="${argv[0]} not found$where"
        refused_rc=127
        : >"$dir/not-found"
    fi
fi

input=/dev/null
[ -e "$dir/stdin" ] && input=$dir/prompt


reporter=()
mapfile -d '' -t reporter <"$dir/reporter" 2>/dev/null
# spex's own interpreter and its flags (the reporter's argv before its -m):
# never the project's cwd or PYTHONPATH on its sys.path.
py=()
for word in "${reporter[@]}"; do
    [ "$word" = -m ] && break
    py+=("$word")
done

# In a git work tree: record its state before the harness touches it (spex
# diff): `git-start`, HEAD and a commit of the work tree made through a
# private copy of its index, as spexsup.pane.snapshot writes it. The plain
# case is five git-sized processes here, not a Python start as well (a wave
# starts a hundred turns at once); anything else (an unborn HEAD, a path that
# JSON would escape, a failing git call, no identity for the commit) goes to
# spexsup.pane.snapshot, which also records an error.
git_start() {
    local LC_ALL=C top index head tree commit scratch=$dir/git-index.tmp
    local -a info=()
    mapfile -t info < <(git --no-optional-locks rev-parse --show-toplevel --git-path index \
        --verify HEAD 2>/dev/null) || return 1
    [ ${#info[@]} = 3 ] || return 1
    top=${info[0]} index=${info[1]} head=${info[2]}
    [[ $top == /* && $top != *[!\ -~]* && $top != *[\"\\]* && $head =~ ^[0-9a-f]+$ ]] ||
        return 1
    [[ $index == /* ]] || index=$PWD/$index
    if [ -e "$index" ]; then
        cp -- "$index" "$scratch" 2>/dev/null || return 1
    fi
    GIT_INDEX_FILE=$scratch git --no-optional-locks add -A -- :/ >/dev/null 2>&1 &&
        tree=$(GIT_INDEX_FILE=$scratch git --no-optional-locks write-tree 2>/dev/null) &&
        commit=$(git commit-tree "$tree" -p "$head" -m "spex: start of turn $turn" 2>/dev/null) &&
        printf '{"toplevel": "%s", "head": "%s", "snapshot": "%s", "error": null}' \
            "$top" "$head" "$commit" >"$dir/git-start.tmp" 2>/dev/null &&
        mv -f "$dir/git-start.tmp" "$dir/git-start"
}
if [ -e "$dir/git-start.todo" ]; then
    if ! git_start && [ ${#py[@]} -gt 0 ]; then
        "${py[@]}" -m spexsup.pane.snapshot "$dir" "$PWD" </dev/null >/dev/null 2>&1
    fi
    rm -f "$dir/git-start.todo" "$dir/git-index.tmp" "$dir/git-start.tmp"
fi

# A sandboxed turn (DESIGN §19): the harness runs inside bubblewrap, with the
# options the launcher wrote in `sandbox` (NUL-separated), after the probe
# (`sandbox_inside`) proved its sandbox; what the probe said goes to
# `sandbox-probed`. With `sandbox-gate` (network `allow`), a gate outside
# (spexsup.pane.netgate), started here beside the sandbox, serves the
# allowed hosts on Unix sockets in `net/`. A missing engine fails the turn
# here (cause `sandbox`); so does a probe that did not hold, once it ran.
launch=()
gate=""
probe_write=""
probed=/dev/null
sandbox_fail() {
    refused="sandbox: $1 - turn NOT started"
    refused_rc=125
    printf '%s\n' "$1" 2>/dev/null >"$dir/sandbox-failed"
}
if [ -z "$refused" ] && [ -r "$dir/sandbox" ]; then
    sandbox=()
    mapfile -d '' -t sandbox <"$dir/sandbox"
    if ! type -P -- "${sandbox[0]}" >/dev/null; then
        sandbox_fail "${sandbox[0]} is not installed (apt-get install bubblewrap)"
    elif [ -r "$dir/sandbox-gate" ] && { ! type -P socat >/dev/null || [ ${#py[@]} -eq 0 ]; }; then
        sandbox_fail "socat is not installed (apt-get install socat)"
    else
        if [ -r "$dir/sandbox-gate" ]; then
            [ -d "$dir/net" ] || mkdir -p -m 700 "$dir/net"  # the launcher made it
            "${py[@]}" -m spexsup.pane.netgate "$dir" "$pid" </dev/null >/dev/null \
                2>>"$dir/netgate.log" &
            gate=$!
            proxy=http://127.0.0.1:3128
            sandbox+=(--bind "$dir/net" /tmp/.spex-net --setenv SPEX_GATE 1)
            for v in HTTPS_PROXY HTTP_PROXY https_proxy http_proxy; do
                sandbox+=(--setenv "$v" "$proxy")
            done
            for v in NO_PROXY no_proxy; do
                sandbox+=(--setenv "$v" "localhost,127.0.0.1,::1")
            done
        fi
        sandbox_args "$dir"
        launch=("${sandbox[@]}" -- "${inside_args[@]}")
        probed=$dir/sandbox-probed
    fi
fi
# After a sandboxed run: did its probe hold? (`held` in sandbox-probed.)
sandbox_held() {
    local said=""
    rm -f -- "$probe_write" 2>/dev/null
    IFS= read -r said <"$dir/sandbox-probed" 2>/dev/null
    if [ "$said" = held ]; then
        : >"$dir/sandbox-held"
        return 0
    fi
    [ -z "$said" ] && said="the engine failed (rc $rc): $(tail -n 1 "$dir/output.log" 2>/dev/null)"
    sandbox_fail "the probe: $said"
    echo "spex: $refused" | tee -a "$dir/output.log"
    rc=$refused_rc
    return 1
}

# A time limit (the turn's, its check's): `start_watchdog LIMIT GRACE MARK`
# starts a watchdog (its pid in `watchdog`) that, when LIMIT expires, leaves
# MARK in the turn dir and ends the turn's processes but the wrapper
# (SIGTERM, SIGKILL after GRACE). `stop_watchdog` cancels it when what it
# bounds ended first, or waits for it when it fired, so its SIGKILL pass is
# over before the end is reported (rc 124).
# Is any process left in session SID (field 6 of /proc/PID/stat)? A scan in
# bash: a check that left nothing costs no Python start to find that out.
session_left() {
    local stat line
    local -a f
    for stat in /proc/[0-9]*/stat; do
        IFS= read -r line 2>/dev/null <"$stat" || continue
        # After the command's name: state ppid pgrp session (digits, a letter).
        line=${line##*) }
        f=($line)
        [ "${f[3]}" = "$1" ] && return 0
    done
    return 1
}

start_watchdog() {
    (
        sleeper=""
        trap '[ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep "$1" &
        sleeper=$!
        wait "$sleeper" || exit 0
        : >"$dir/$3"
        "${py[@]}" -m spexsup.pane.deadline "$dir" "$pid" "$2" </dev/null
    ) &
    watchdog=$!
}
stop_watchdog() {
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
}

watchdog=""
if [ -r "$dir/deadline" ] && [ ${#reporter[@]} -gt 0 ] && [ -z "$refused" ]; then
    read -r limit grace <"$dir/deadline"
    start_watchdog "$limit" "$grace" timed-out
fi

# What the harness prints is counted on its way to output.log (`wc -c`, fed
# by a tee through `tap`): when the log's writer fails a write (a full disk;
# tee and the renderer exit 1 then, and go on showing the pane), the bytes it
# could not keep are the count less what the log grew by, said in the final
# markers (`lost:`). `count_start` opens the count; `count_end` closes it
# and reads it into `seen` ("" when the counter was killed: unknown).
count_start() {
    local p
    exec {p}<> <(:)
    exec {counted}< <(exec wc -c <"/dev/fd/$p" {p}>&-)
    exec {tap}>"/dev/fd/$p"
    exec {p}>&-
}
count_end() {
    exec {tap}>&-
    seen=""
    read -r seen <&"$counted"
    exec {counted}<&-
    [[ $seen =~ ^[0-9]+$ ]] || seen=""
}
# `tally_lost STATUS SIZE`: the log's writer exited STATUS, the log held SIZE
# bytes before the run; adds what it could not keep to `lost`.
tally_lost() {
    local now missing
    [ "$1" = 1 ] || return 0
    now=$(stat -c %s -- "$dir/output.log" 2>/dev/null) || now=0
    if [ -z "$seen" ] || [ "$lost" = "?" ]; then
        lost="?"
        return 0
    fi
    missing=$((seen - (now - $2)))
    [ "$missing" -gt 0 ] && lost=$((${lost:-0} + missing))
    return 0
}
lost=""

# Output goes live to the pane and to output.log. PIPESTATUS keeps the
# harness's own status; bash reports a signal death as 128+signal. A CLI
# that speaks JSON events (`render` names its parser) shows the pane their
# rendering, while output.log keeps the raw stream.
render=""
if [ -r "$dir/render" ] && [ ${#py[@]} -gt 0 ]; then
    read -r render <"$dir/render"
fi
# The prompt's first line, so a person attaching sees what the turn is about.
if [ -z "$refused" ] && [ ${#argv[@]} -gt 0 ]; then
    # Read by the shell itself (no head, tr or subshell: a wave starts many
    # turns at once); `read` drops NUL bytes, the pattern the other controls.
    first=""
    IFS= read -r -n 4096 first <"$dir/prompt" 2>/dev/null
    first=${first//[[:cntrl:]]/}
    [ ${#first} -gt 160 ] && first="${first:0:159}…"
    printf '[spex] turn %s: %s\n' "$turn" "$first"
fi
if [ ${#argv[@]} -eq 0 ]; then
    echo "spex: empty harness argv in $dir" | tee -a "$dir/output.log"
    rc=127
elif [ -n "$refused" ]; then
    echo "spex: $refused" | tee -a "$dir/output.log"
    rc=$refused_rc
else
    # With `on-limit` (--on-limit wait): a usage limit with a reset time in
    # reach is waited out here in the pane (`limited:<pid>:<reset_epoch>`),
    # then the harness runs again resuming the same conversation; the
    # attempt that hit the limit keeps its output as limited-N.output.log.
    waits=0
    # A staggered launch: when its harness really starts, which the next
    # launch of that harness keeps its distance from (spexsup.adapters.stagger).
    if [ -e "$dir/stagger" ]; then
        { printf '%s\n' "${EPOCHREALTIME//[!0-9]/}" >"$dir/started"; } 2>/dev/null
    fi
    while :; do
        # (No stat for a log not made yet: the first attempt's, most often.)
        size=0
        if [ -e "$dir/output.log" ]; then
            size=$(stat -c %s -- "$dir/output.log" 2>/dev/null) || size=0
        fi
        count_start
        if [ -n "$render" ]; then
            (exec {tap}>&- && umask "$user_umask" && exec "${launch[@]}" "${argv[@]}") <"$input" \
                3>"$probed" 2>&1 |
                tee "/dev/fd/$tap" |
                "${py[@]}" -m spexsup.pane.pretty feed "$dir/output.log" "$render" {tap}>&-
            piped=("${PIPESTATUS[0]}" "${PIPESTATUS[2]}")
        else
            (exec {tap}>&- && umask "$user_umask" && exec "${launch[@]}" "${argv[@]}") <"$input" \
                3>"$probed" 2>&1 | tee -a "$dir/output.log" "/dev/fd/$tap"
            piped=("${PIPESTATUS[0]}" "${PIPESTATUS[1]}")
        fi
        rc=${piped[0]}
        count_end
        tally_lost "${piped[1]}" "$size"
        if [ ${#launch[@]} -gt 0 ] && ! sandbox_held; then
            break
        fi
        # With `fallback` (--fallback-model): an attempt that failed on its
        # model before doing any work runs again on the next model, the same
        # turn (its output kept as attempt-N.output.log).
        if [ -r "$dir/fallback" ] && [ ! -e "$dir/timed-out" ] && [ ${#reporter[@]} -gt 0 ] &&
            said=$("${py[@]}" -m spexsup.pane.fallback next "$dir" "$rc" </dev/null); then
            argv=()
            mapfile -d '' -t argv <"$dir/argv"
            input=/dev/null
            [ -e "$dir/stdin" ] && input=$dir/prompt
            printf '%s\n' "$said" | tee -a "$dir/output.log"
            continue
        fi
        if [ ! -r "$dir/on-limit" ] || [ $waits -ge 5 ] || [ -e "$dir/timed-out" ] ||
            [ ${#reporter[@]} -eq 0 ]; then
            break
        fi
        plan=$("${py[@]}" -m spexsup.pane.limit plan "$dir" </dev/null 2> >(tee -a "$dir/output.log" >&2)) ||
            break
        read -r reset until <<<"$plan"
        waits=$((waits + 1))
        mark "limited:$pid:$reset"
        status "turn $turn waiting for usage reset"
        now=$(date +%s)
        if [ "$until" -gt "$now" ]; then
            sleep $((until - now)) &
            wait $!
        fi
        # A stop (or the time limit) during the wait ends the turn here.
        "${py[@]}" -m spexsup.pane.limit still "$dir" </dev/null || break
        mv -f "$dir/output.log" "$dir/limited-$waits.output.log"
        argv=()
        mapfile -d '' -t argv <"$dir/argv"
        input=/dev/null
        [ -e "$dir/stdin" ] && input=$dir/prompt
        mark "running:$pid"
        status "turn $turn running"
        printf '[spex] usage limit reset: resuming the conversation\n' | tee -a "$dir/output.log"
    done
fi
[ -n "$gate" ] && kill "$gate" 2>/dev/null
if [ -n "$watchdog" ]; then
    stop_watchdog
    if [ -e "$dir/timed-out" ]; then
        printf '\n[spex] turn %s ran past its time limit (%ss): ended\n' "$turn" "$limit" |
            tee -a "$dir/output.log"
        rc=124
    fi
fi

# A check of the turn's work (`--verify`): after a clean exit that stands on
# its own (spexsup.pane.verify decides and records the start), the check runs
# here in the pane, in the turn's cwd and environment, its output shown and
# appended to verify.log, bounded by its own watchdog (`verify-timed-out`,
# rc 124); its status goes to verify-rc for the reporter, which judges the
# end by it. `verifying:<pid>` is the same live wrapper: the turn runs on.
if [ "$rc" = 0 ] && [ -r "$dir/verify" ] && [ -z "$refused" ] && [ ${#py[@]} -gt 0 ] &&
    [ ! -e "$dir/timed-out" ] &&
    { "${py[@]}" -m spexsup.pane.verify start "$dir" </dev/null | tee -a "$dir/verify.log"; } &&
    [ "${PIPESTATUS[0]}" = 0 ]; then
    check=()
    mapfile -d '' -t check <"$dir/verify"
    mark "verifying:$pid"
    status "turn $turn verifying"
    watchdog=""
    if [ -r "$dir/verify-deadline" ]; then
        read -r check_limit check_grace <"$dir/verify-deadline"
        start_watchdog "$check_limit" "$check_grace" verify-timed-out
    fi
    # In a process session of its own, so that its verdict is its own exit:
    # what it leaves running (a server started in the background, holding
    # its output open) is ended then, never waited for until the time limit.
    exec {check_out}> >(tee -a "$dir/verify.log")
    check_tee=$!
    (umask "$user_umask" && exec setsid -w "${check[@]}") </dev/null >&"$check_out" 2>&1 &
    check_pid=$!
    wait "$check_pid"
    check_rc=$?
    exec {check_out}>&-
    # Its last output drains; a leftover still holding the pipe (in its
    # session, or one that left it with setsid) is ended.
    for ((i = 0; i < 100; i++)); do
        kill -0 "$check_tee" 2>/dev/null || break
        sleep 0.01
    done
    { session_left "$check_pid" || kill -0 "$check_tee" 2>/dev/null; } &&
        "${py[@]}" -m spexsup.pane.verify end "$dir" "$check_pid" "$check_tee" </dev/null
    wait "$check_tee" 2>/dev/null
    [ -n "$watchdog" ] && stop_watchdog
    if [ -e "$dir/verify-timed-out" ]; then
        printf '[spex] the check ran past its time limit (%ss): ended\n' "$check_limit" |
            tee -a "$dir/verify.log"
        check_rc=124
    fi
    printf '%s\n' "$check_rc" 2>/dev/null >"$dir/verify-rc.tmp" &&
        mv -f "$dir/verify-rc.tmp" "$dir/verify-rc"
    status "turn $turn verified rc=$check_rc"
fi

ran=$(((${EPOCHREALTIME//[!0-9]/} - began) / 1000))
[ "$ran" -ge 0 ] || ran=0
run=":ran:$ran"
[ -n "$lost" ] && run+=":lost:$lost"
mark "reporting:$pid:$rc$run"

# Read again: what the harness may have done to its turn dir is the reporter's
# to find out, not ours to have cached.
reporter=()
mapfile -d '' -t reporter <"$dir/reporter" 2>/dev/null
if [ ${#reporter[@]} -gt 0 ]; then
    # Marked as the wrapper's own step: a stop killing the turn spares it
    # (procs.turn_processes), so the end and its line are still recorded.
    # It gets the marker above whether or not the disk took it, and our
    # stdin as fd 3: the pane's terminal, whose typed keys it drops (`typed`).
    SPEXSUP_STEP=report SPEXSUP_MARKER="reporting:$pid:$rc$run" SPEXSUP_TTY_FD=3 \
        "${reporter[@]}" "$rc" 3<&0 </dev/null
    cas=$?
else
    echo "spex: the exit reporter is missing from $dir" >&2
    cas=127
fi

# The pane goes back to a shell below: when (`@spex_shell_at`), so a launch
# soon after waits for a shell still reading its rc files (turn.launch)
# rather than call the pane busy. One tmux client with the status.
[ -n "${TMUX_PANE:-}" ] && tmux set-option -p -t "$TMUX_PANE" @spex_state "turn $turn ended rc=$rc" \; \
    set-option -p -t "$TMUX_PANE" @spex_shell_at "$EPOCHSECONDS" 2>/dev/null

# Keys typed into the pane while a person watched the turn sit in the pty;
# left there, the shell would run them as commands. The reporter dropped
# them (`typed`); when it could not, they are dropped here. Said either way.
note=""
pending=""
if [ -r "$dir/typed" ]; then
    read -r pending <"$dir/typed"
elif [ -t 0 ] && [ ${#reporter[@]} -gt 0 ]; then
    pending=$("${reporter[0]}" -S -I -c '
import fcntl, struct, termios
n = struct.unpack("i", fcntl.ioctl(0, termios.FIONREAD, b"\0" * 4))[0]
termios.tcflush(0, termios.TCIFLUSH)
print(n)' 2>/dev/null)
fi
[ "${pending:-0}" != 0 ] && note="; input typed during the turn was discarded"
# The reporter leaves how the turn ended, as a person reads it (flags, a
# failure's cause, a stop), for this line.
ended=""
if [ -r "$dir/ended" ]; then
    IFS= read -r ended <"$dir/ended"
    [ -n "$ended" ] && ended=" · $ended"
fi
printf '\n[spex] turn %s ended rc=%s%s%s\n' "$turn" "$rc" "$ended" "$note"

# `exit:` last: a launch that follows this turn waits for it (turn.launch
# `_await_reporter`) before its respawn-pane -k, which would cut the end line.
mark "exit:$rc:cas:$cas$run"

unset SPEXSUP_TURN SPEXSUP_TURN_DIR SPEXSUP_PROMPT_FILE
umask "$user_umask"
exec "${SHELL:-/bin/bash}"
