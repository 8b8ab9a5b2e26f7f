"""Several hosts at once: the fleet view (`ls --all-hosts`), `spex hosts`,
and fan-out waves whose legs live on several hosts.

Hosts are asked in parallel, one ssh command each (never one per session or
leg). Each host's answer is its own spex's truth; a host that cannot be
reached is reported as such and nothing about it is guessed.

A fleet wave runs one `spex fanout --json` per host (the local one too, as a
child process, so every host is driven the same way) with the prompt on
stdin. Its document, `fleet/<id>.json` in the local state home, records each
leg's host and each host's own wave id; `--retry-failed` of a fleet wave runs
`spex fanout --retry-failed HOSTWAVE` on each host that had failed legs (or
the saved prompt again where the host was never reached), under the fleet
wave's recorded per-turn options (`turn_options`, as a local wave's) with
the ones given to the retry winning.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from spexsup import ids, states, usage
from spexsup.adapters import hosts
from spexsup.adapters.mainwait import results
from spexsup.errors import Failed, Invalid, Refused, SpexError
from spexsup.ids import SCHEMA_VERSION, TURN_OPTIONS, recorded_options, validate_name
from spexsup.paths import ensure_private_dir, own_python, write_atomic
from spexsup.record import Record

if TYPE_CHECKING:
    from spexsup.config import Config

T = TypeVar("T")
LOCAL = hosts.LOCAL
SUCCESS = states.SUCCESS
FLEET_PREFIX = "fleet-"


def choose(config: Config, names: Sequence[str] | None) -> list[str]:
    """`local` and every configured host, or the ones named (validated)."""
    configured = hosts.configured(config)
    if names is None:
        return [LOCAL, *configured]
    for n in names:
        if n != LOCAL and n not in configured:
            known = ", ".join([LOCAL, *configured])
            hint = f"[host.NAME] in config.toml; known: {known}"
            raise Refused(f"no host named {n!r}", hint=hint)
    return list(dict.fromkeys(names))


def parallel(fn: Callable[[str], T], names: Sequence[str]) -> list[T]:
    if len(names) <= 1:
        return [fn(n) for n in names]
    pool = ThreadPoolExecutor(max_workers=min(16, len(names)))
    try:
        return results([pool.submit(fn, n) for n in names])
    except BaseException:
        # Interrupted: leave now. The hosts' commands run on (their turns
        # are theirs to record); waiting for them could take hours.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=False)


def _spex_here(state: Path, args: list[str], stdin: bytes | None = None) -> hosts.Answer:
    """This machine's spex as a child, answering as a host would. The home is
    this command's own (SPEXSUP_HOME or the default, made on first use), so
    the child may make it too: `--create`."""
    done = subprocess.run(
        [*own_python("spexsup"), "--home", str(state), "--create", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    return hosts.Answer(done.returncode, done.stdout, done.stderr)


def ask(
    config: Config, state: Path, name: str, args: list[str], stdin: bytes | None = None
) -> hosts.Answer:
    if name == LOCAL:
        return _spex_here(state, args, stdin)
    return hosts.call(hosts.lookup(config, name), state, args, stdin=stdin)


def _cause(answer: hosts.Answer) -> str:
    doc = answer.document()
    if isinstance(doc, dict) and doc.get("error"):
        return str(doc["error"])
    lines = answer.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1].removeprefix("spex: ") if lines else f"exit {answer.rc}"


# -- the fleet view --------------------------------------------------------------


def list_sessions(
    config: Config, state: Path, names: Sequence[str] | None
) -> tuple[list[dict[str, Any]], bool]:
    """Every chosen host's `ls --json` rows with `host` added; an unreachable
    host is one row `{host, reachable: false, error}`. (rows, all reached)."""
    chosen = choose(config, names)

    def one(name: str) -> list[dict[str, Any]]:
        try:
            answer = ask(config, state, name, ["ls", "--json"])
        except SpexError as e:
            return [unreachable(name, e.line())]
        doc = answer.document()
        if answer.rc != 0 or not isinstance(doc, list):
            return [unreachable(name, _cause(answer))]
        return [{"host": name, **row} for row in doc]

    rows = [r for group in parallel(one, chosen) for r in group]
    return rows, all(r.get("reachable", True) for r in rows)


def unreachable(host: str, error: str) -> dict[str, Any]:
    """The one row of `ls --all-hosts` for a host not reached."""
    return {"schema_version": SCHEMA_VERSION, "host": host, "reachable": False, "error": error}


def describe_hosts(config: Config, state: Path) -> list[dict[str, Any]]:
    """`spex hosts`: each configured host's reachability, spex version, session count."""
    configured = hosts.configured(config)

    def one(name: str) -> dict[str, Any]:
        host = configured[name]
        row: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "name": name,
            "ssh": host.ssh,
            "reachable": False,
            "version": None,
            "sessions": None,
            "error": None,
        }
        try:
            row["version"] = hosts.remote_version(host, state)
            row["reachable"] = True
            answer = hosts.call(host, state, ["ls", "--json"])
        except SpexError as e:
            row["error"] = e.line()
            return row
        doc = answer.document()
        if isinstance(doc, list):
            row["sessions"] = len(doc)
        else:
            row["error"] = _cause(answer)
        return row

    return parallel(one, list(configured))


# -- fleet waves ---------------------------------------------------------------------


def fleet_dir(state: Path) -> Path:

    return ensure_private_dir(state / "fleet", under=state)


def resolve(state: Path, ident: str) -> str:
    d = state / "fleet"
    found = sorted(p.stem for p in d.glob(f"{ident}*.json")) if d.is_dir() else []
    if ident in found:
        return ident
    if len(found) != 1:
        what = "no" if not found else "more than one"
        raise Refused(
            f"{what} fleet wave matches {ident!r}", hint="see the fleet/ directory or spex wave"
        )
    return found[0]


def load(state: Path, ident: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((fleet_dir(state) / f"{ident}.json").read_text())
    return doc


def list_docs(state: Path) -> list[dict[str, Any]]:
    """Every fleet wave's document in this state home (unreadable ones skipped)."""
    d = state / "fleet"
    docs: list[dict[str, Any]] = []
    for path in sorted(d.glob(f"{FLEET_PREFIX}*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("legs"), list):
            docs.append(doc)
    return docs


def save(state: Path, doc: dict[str, Any]) -> None:

    write_atomic(
        fleet_dir(state) / f"{doc['id']}.json", (json.dumps(doc, indent=2) + "\n").encode()
    )


def group_legs(names: Sequence[str]) -> dict[str, list[str]]:
    """`box1:a b box2:c` -> {"box1": ["a"], "local": ["b"], "box2": ["c"]}."""

    groups: dict[str, list[str]] = {}
    for word in names:
        host, name = hosts.check_address(word)
        validate_name(name)
        groups.setdefault(host or LOCAL, []).append(name)
    return groups


def turn_argv(turn_options: dict[str, Any]) -> list[str]:
    """`--window`, `--timeout`, `--strict`/`--no-strict`, `--on-limit`,
    `--stagger` for a host's `spex fanout`, from `turn_options` (None: not
    given)."""
    argv: list[str] = []
    if turn_options.get("window") is not None:
        argv += ["--window", f"{float(turn_options['window']):f}"]
    if turn_options.get("timeout") is not None:
        argv += ["--timeout", f"{float(turn_options['timeout']):f}"]
    if turn_options.get("strict") is not None:
        argv.append("--strict" if turn_options["strict"] else "--no-strict")
    if turn_options.get("on_limit") is not None:
        argv += ["--on-limit", str(turn_options["on_limit"])]
    if turn_options.get("model") is not None:
        argv += ["--model", str(turn_options["model"])]
    if turn_options.get("fallback") is not None:
        argv += ["--fallback-model", ",".join(turn_options["fallback"])]
    if turn_options.get("stagger") is not None:
        argv += ["--stagger", f"{float(turn_options['stagger']):f}"]
    check = turn_options.get("verify")
    if check is not None:
        from spexsup.adapters.harness import shown_verify

        argv += ["--verify", shown_verify(check)] if check else ["--no-verify"]
    if turn_options.get("verify_timeout") is not None:
        argv += ["--verify-timeout", f"{float(turn_options['verify_timeout']):f}"]
    return argv


class Retry(Record):
    """A fleet wave run again for its failed legs: the fleet wave it retries
    (`of`), and each host's own wave whose failed legs that host relaunches
    (a host missing here, never reached, gets the saved prompt again)."""

    of: str
    waves: Mapping[str, str]


def fanout(
    config: Config,
    state: Path,
    groups: dict[str, list[str] | None],
    prompt: bytes,
    *,
    options: list[str],
    turn_options: dict[str, Any] | None = None,
    match: str | None = None,
    retry: Retry | None = None,
) -> dict[str, Any]:
    """Run one `spex fanout --json` per host of `groups` (host -> its session
    names, or None for `--match`/`--all` there) in parallel, and record the
    fleet wave (and, for a `retry`, link the wave it retries to it).
    `turn_options` (window, timeout, strict, on_limit, stagger) go to
    every host's fan-out and into the fleet wave's document."""

    turn = {k: (turn_options or {}).get(k) for k in TURN_OPTIONS}
    options = [*options, *turn_argv(turn)]
    turn["strict"] = bool(turn["strict"])

    for name in groups:
        choose(config, [name])
    wave_id = FLEET_PREFIX + ids.new_id()
    fleet_dir(state)

    write_atomic(fleet_dir(state) / f"{wave_id}.prompt", prompt)

    rerun = retry.waves if retry is not None else {}

    def one(host: str) -> dict[str, Any]:
        names = groups[host]
        if host in rerun:
            args = ["fanout", "--retry-failed", rerun[host], *(names or []), "--json", *options]
            stdin = None
        else:
            picked = names if names is not None else (["--match", match] if match else ["--all"])
            args = ["fanout", *picked, "-f", "-", "--json", *options]
            stdin = prompt
        try:
            if host == LOCAL or host in rerun:
                answer = ask(config, state, host, args, stdin)
            else:
                # Keyed (the given --key, else one made for this fleet wave)
                # and asked again after a dropped connection: no leg twice.
                there = hosts.lookup(config, host)
                answer = hosts.call_keyed(there, state, args, wave_id, stdin=stdin)
        except SpexError as e:
            return {"host": host, "wave": None, "error": e.line(), "legs": names or []}
        doc = answer.document()
        if not isinstance(doc, dict) or "legs" not in doc:
            return {"host": host, "wave": None, "error": _cause(answer), "legs": names or []}
        return {"host": host, "doc": doc}

    parts = parallel(one, list(groups))
    legs: list[dict[str, Any]] = []
    waves: list[dict[str, Any]] = []
    spent: list[usage.Spend] = []
    for part in parts:
        host = part["host"]
        if "doc" not in part:
            waves.append({"host": host, "wave": None, "state": "failed", "error": part["error"]})
            legs.extend(_failed_leg(host, n, part["error"]) for n in part["legs"])
            spent.append(usage.from_json(None))  # it may have launched some: unknown
            continue
        doc = part["doc"]
        # Each host's wave says what it spent (a spex before issue 26: unknown).
        cost = {"usage": doc.get("usage"), "cost": doc.get("cost")}
        spent.append(usage.from_json(cost if doc.get("cost") else None))
        waves.append(
            {"host": host, "wave": doc.get("id"), "state": doc.get("state"), "error": None, **cost}
        )
        legs.extend({"host": host, **leg, "wave": doc.get("id")} for leg in doc["legs"])
    ok = [leg for leg in legs if leg.get("verdict") in SUCCESS]
    waited = "--wait" in options
    if waited:
        whole = all(w["state"] == states.WaveState.COMPLETE for w in waves) and bool(legs)
    else:
        whole = len(ok) == len(legs) and bool(legs)
    state_ = "complete" if whole else "failed" if not ok else "partial"
    out = {
        "schema_version": SCHEMA_VERSION,
        "id": wave_id,
        "kind": "fleet",
        "state": state_,
        "created_at": time.time(),
        "retry_of": retry.of if retry is not None else None,
        "retried_by": [],
        "turn_options": turn,
        "hosts": waves,
        "legs": legs,
    }
    if spent:
        summed = usage.grand(spent)
        out.update(usage=summed.usage_json(), cost=summed.cost_json())
    save(state, out)
    if retry is not None:
        old = load(state, retry.of)
        old["retried_by"] = [*old.get("retried_by", []), wave_id]
        save(state, old)
    return out


def _failed_leg(host: str, session: str, error: str) -> dict[str, Any]:
    return {
        "host": host,
        "session": session,
        "status": "done",
        "verdict": states.Verdict.FAILED,
        "turn": None,
        "rc": None,
        "error": error,
        "wave": None,
    }


def retry_failed(
    config: Config,
    state: Path,
    ident: str,
    *,
    options: list[str],
    given: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Relaunch the failed legs of fleet wave `ident`, host by host, under its
    recorded per-turn options (those in `given` that are not None win); None
    if none failed."""
    wave_id = resolve(state, ident)
    doc = load(state, wave_id)
    failed = [leg for leg in doc["legs"] if leg.get("verdict") not in SUCCESS]
    if not failed:
        return None
    groups: dict[str, list[str] | None] = {}
    waves: dict[str, str] = {}  # host -> its own wave, where it ran one
    for leg in failed:
        groups.setdefault(leg["host"], [])
        names = groups[leg["host"]]
        assert names is not None
        names.append(leg["session"])
        if leg.get("wave"):
            waves[leg["host"]] = leg["wave"]
    try:
        prompt = (fleet_dir(state) / f"{wave_id}.prompt").read_bytes()
    except OSError as e:
        raise Failed(f"fleet wave {wave_id}: its prompt is gone: {e.strerror}") from None
    if not prompt:
        raise Invalid(f"fleet wave {wave_id}: its prompt is empty")
    turn = recorded_options(doc)
    turn.update({k: v for k, v in (given or {}).items() if v is not None})
    return fanout(
        config,
        state,
        groups,
        prompt,
        options=options,
        turn_options=turn,
        retry=Retry(wave_id, waves),
    )
