"""Schedules on an engine the machine already runs: a systemd user timer, or
a line in the user's crontab. Never a spex daemon.

Here are the clock's words and the engines' edits, with explicit parameters
and no state of spex's own (`spexsup.turn.scheduled` keeps the record):

- a **cadence** is one 5-field cron expression, validated against the grammar
  Debian's cron reads (`--every D` is mapped to one: a period that repeats
  evenly on the clock), and so means the same on either engine;
- a firing's **slot** is the minute it was due (the latest minute the cadence
  names at or before the firing), in UTC: `20261201T0900Z`. A late or doubled
  firing of one slot computes the same slot, and so the same wake key;
- the **engines**: `systemd` (a `.service` and `.timer` pair under
  `~/.config/systemd/user/`, `systemctl --user daemon-reload`, `enable --now`)
  where `systemctl --user` answers, else `cron` (a block of the user's crontab
  marked with the state home, edited by `crontab -l` / `crontab -` under a
  lock, so homes and processes never clobber each other's lines).
  `SPEXSUP_SCHEDULE_ENGINE=systemd|cron` chooses one.

Times are the system's local time (`/etc/localtime`), as the cron daemon and
the systemd manager read them; next and due times are computed by `cronsim`,
which follows Debian cron around daylight-saving changes. Every external
command is bounded in time and its failure is a one-line SpexError.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path

from spexsup import durations
from spexsup.errors import Failed, Invalid, Refused, clip
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.record import Record

ENGINES = ("systemd", "cron")
ENGINE_VAR = "SPEXSUP_SCHEDULE_ENGINE"
OVERLAPS = ("skip", "queue")
# How long an engine's command may take (systemctl, crontab) before it is a failure.
COMMAND_TIMEOUT = 10.0
# `systemctl --user show-environment` answers at once where a user manager runs.
PROBE_TIMEOUT = 3.0
CRON_HINT = "5 fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'"

# --- cadences ----------------------------------------------------------------------


class Cadence(Record):
    """When a schedule fires: its cron expression, and --every's seconds when
    it was given that way (for the text that shows it)."""

    cron: str
    every: float | None = None

    def describe(self) -> str:
        if self.every is not None:
            return f"every {durations.spell(self.every)}"
        return f"cron '{self.cron}'"


# Periods that repeat evenly on the clock, and the expression each is.
_EVERY_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
_EVERY_HOURS = (1, 2, 3, 4, 6, 8, 12)
EVERY_HINT = (
    "a period the clock repeats evenly: minutes that divide an hour (1m 2m 3m 4m 5m 6m 10m"
    " 12m 15m 20m 30m), hours that divide a day (1h 2h 3h 4h 6h 8h 12h), 1d or 1w;"
    " anything else as --cron"
)


def parse_every(text: str) -> Cadence:
    """`--every D` (the duration grammar) as the cron expression that fires at
    every multiple of D on the clock: 15m is `*/15 * * * *`, 2h `0 */2 * * *`,
    1d midnight, 1w Sunday midnight. Invalid for a period cron cannot repeat
    evenly (90m, 7m, 2d)."""
    seconds = durations.parse(text, "--every", minimum=60, maximum=durations.WEEK)
    minutes = seconds / 60
    cron = None
    if minutes in _EVERY_MINUTES:
        cron = "* * * * *" if minutes == 1 else f"*/{int(minutes)} * * * *"
    elif minutes / 60 in _EVERY_HOURS:
        hours = int(minutes / 60)
        cron = "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    elif seconds == durations.UNITS["d"]:
        cron = "0 0 * * *"
    elif seconds == durations.WEEK:
        cron = "0 0 * * 0"
    if cron is None:
        raise Invalid(f"invalid --every {clip(repr(text))}", hint=EVERY_HINT)
    return Cadence(cron, seconds)


# Debian cron's shorthands that repeat (not @reboot: no clock fires it).
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_NUMBER = r"[0-9]{1,2}"
_MONTH = r"(?:[0-9]{1,2}|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_DOW = r"(?:[0-9]|sun|mon|tue|wed|thu|fri|sat)"


def _field_re(value: str) -> re.Pattern[str]:
    # Vixie cron's grammar: `*` or `*/N`, a value, or a range with an optional
    # step, in a comma list. (`5/10` is not cron's: it is `5-59/10`.)
    item = rf"(?:\*(?:/[0-9]{{1,2}})?|{value}(?:-{value}(?:/[0-9]{{1,2}})?)?)"
    return re.compile(rf"{item}(?:,{item})*", re.IGNORECASE)


_FIELD_RES = tuple(_field_re(v) for v in (_NUMBER, _NUMBER, _NUMBER, _MONTH, _DOW))


def parse_cron(text: str) -> Cadence:
    """`--cron EXPR`: five fields as Debian's cron reads them (numbers, `*`,
    ranges, steps, lists; month and day names; the repeating @nicknames).
    Invalid, naming the field, for anything cron or the engines would not
    take the same way: six fields, `L`, `W`, `#`, `?`, a value out of range,
    a date that never comes (`0 0 30 2 *`)."""
    from cronsim import CronSimError

    shown = clip(repr(text))
    fields = _NICKNAMES.get(text.strip().lower(), text).split()
    if len(fields) != len(_FIELDS):
        raise Invalid(f"invalid --cron {shown}: {len(fields)} fields", hint=CRON_HINT)
    for name, field, pattern in zip(_FIELDS, fields, _FIELD_RES, strict=True):
        if not pattern.fullmatch(field):
            raise Invalid(f"invalid --cron {shown}: bad {name} {field!r}", hint=CRON_HINT)
    cron = " ".join(fields)
    try:
        if next_after(cron, time.time()) is None:
            raise Invalid(f"invalid --cron {shown}: it never fires", hint=CRON_HINT)
    except CronSimError as e:
        word = str(e).removeprefix("Bad ") or "expression"
        raise Invalid(f"invalid --cron {shown}: bad {word}", hint=CRON_HINT) from None
    return Cadence(cron)


def cadence(every: str | None, cron: str | None) -> Cadence:
    """Exactly one of --every and --cron."""
    if (every is None) == (cron is None):
        raise Invalid(
            "give --every or --cron" if every is None else "--every and --cron: choose one",
            hint="spex schedule add NAME --every 1h -m TEXT, or --cron '0 9 * * 1-5'",
        )
    return parse_every(every) if every is not None else parse_cron(cron or "")


# --- slots -------------------------------------------------------------------------


def zone() -> tzinfo:
    """The system's time zone (what cron and systemd fire by), else UTC."""
    from zoneinfo import ZoneInfo

    try:
        with Path("/etc/localtime").open("rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        return UTC


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, zone())


def next_after(cron: str, now: float) -> float | None:
    """The first firing after `now` (None if the cadence never fires again)."""
    from cronsim import CronSim

    try:
        return next(CronSim(cron, _at(now))).timestamp()
    except StopIteration:
        return None


def due(cron: str, now: float) -> float:
    """The slot a firing at `now` is for: the latest minute the cadence names
    at or before `now`'s minute. A firing that comes late (a loaded machine, a
    timer held back) is still for the slot it was due in; two firings of one
    slot compute the same one."""
    from cronsim import CronSim

    minute = now - now % 60
    try:
        return next(CronSim(cron, _at(minute + 1), reverse=True)).timestamp()
    except StopIteration:
        return minute


def slot(epoch: float) -> str:
    """A slot's name, its minute in UTC: `20261201T0900Z`."""
    return time.strftime("%Y%m%dT%H%MZ", time.gmtime(epoch))


def fire_key(schedule: str, epoch: float) -> str:
    """The wake key of a firing: one turn per schedule and slot."""
    return f"sched-{schedule}-{slot(epoch)}"


# --- what an engine runs -----------------------------------------------------------


class Firing(Record):
    """What an engine keeps for one schedule: when, and the command it runs."""

    schedule: str
    session: str
    cadence: Cadence
    argv: tuple[str, ...]
    # Variables the interpreter needs before spex runs (PYTHONPATH, when spex
    # is importable only through it); the rest of the environment is restored
    # by the firing itself from the schedule's record.
    env: tuple[tuple[str, str], ...]
    log: Path

    @property
    def unit(self) -> str:
        return unit_name(self.schedule)


def firing_argv(home: Path, schedule: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """`python -P [-E] -m spexsup --home HOME internal schedule-fire ID` of
    this spex (absolute paths: cron's PATH is /usr/bin:/bin), and PYTHONPATH
    when this spex is importable only through it."""
    from spexsup.paths import own_python

    argv = own_python("spexsup")
    env: tuple[tuple[str, str], ...] = ()
    if "-E" not in argv and os.environ.get("PYTHONPATH"):
        env = (("PYTHONPATH", os.environ["PYTHONPATH"]),)
    return (*argv, "--home", str(home), "internal", "schedule-fire", schedule), env


def _checked_text(value: str, what: str) -> str:
    if "\n" in value or "\r" in value or "\0" in value:
        raise Invalid(f"{what} {clip(repr(value))} holds a newline; an engine cannot run it")
    return value


# --- cron --------------------------------------------------------------------------


def cron_line(firing: Firing) -> str:
    """The crontab line: `EXPR [VAR=…] ARGV… >>LOG 2>&1`, quoted for cron's
    /bin/sh, every `%` escaped (cron reads a bare one as a newline)."""
    words = [f"{k}={shlex.quote(_checked_text(v, k))}" for k, v in firing.env]
    words += [shlex.quote(_checked_text(w, "the firing command")) for w in firing.argv]
    words.append(f">>{shlex.quote(_checked_text(str(firing.log), 'the log'))} 2>&1")
    return f"{firing.cadence.cron} {' '.join(words)}".replace("%", "\\%")


def block_marks(home: Path) -> tuple[str, str]:
    """The first and last line of this home's block in a crontab."""
    where = _checked_text(str(home), "the state home")
    return (
        f"# >>> spexsup schedules of {where} (kept by spex schedule; edits are lost) >>>",
        f"# <<< spexsup schedules of {where} <<<",
    )


def _lines(table: str) -> list[str]:
    """`table`'s lines, each with its newline (the last may have none). Split
    on the newline only, as cron reads a table: a carriage return or a form
    feed stays inside its line (`str.splitlines` would cut there)."""
    parts = table.split("\n")
    return [f"{p}\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _is(line: str, mark: str) -> bool:
    # A table saved with CRLF line ends keeps its marks: the block is found.
    return line.removesuffix("\n").removesuffix("\r") == mark


def _split(table: str, home: Path) -> tuple[list[str], list[str]]:
    """`table`'s lines outside this home's block (another home's block
    included), each as it was with its own line end, and those inside it
    (the marks left out, without their newline).

    Failed, naming the line, for a mark without its pair (a begin mark with
    no end mark after it, an end mark with no begin mark before it): what is
    the block there is unknown, and guessing would lose the user's lines."""
    begin, end = block_marks(home)
    outside: list[str] = []
    inside: list[str] = []
    opened = 0  # the line number of the begin mark of the block we are in
    for number, line in enumerate(_lines(table), start=1):
        if _is(line, begin):
            if opened:
                raise _damaged(opened, "begin", f"before the next begin mark (line {number})", home)
            opened = number
        elif _is(line, end):
            if not opened:
                raise _damaged(number, "end", "before it", home)
            opened = 0
        elif opened:
            inside.append(line.removesuffix("\n"))
        else:
            outside.append(line)
    if opened:
        raise _damaged(opened, "begin", "after it", home)
    return outside, inside


def _damaged(number: int, which: str, where: str, home: Path) -> Failed:
    begin, end = block_marks(home)
    other, missing = ("end", end) if which == "begin" else ("begin", begin)
    return Failed(
        f"your crontab's line {number} is the {which} mark of this home's schedules with no"
        f" {other} mark {where}",
        hint=f"spex edits only a whole block; crontab -e: add the line '{missing}' where this"
        f" home's lines {other}, or delete the mark",
    )


def replace_block(table: str, home: Path, lines: Sequence[str]) -> str:
    """`table` with this home's block holding exactly `lines` (no block for
    none), at its end; every other line, another home's block included, as
    it was, byte for byte. Failed for a damaged block (see `_split`)."""
    kept, _ = _split(table, home)
    if lines:
        begin, end = block_marks(home)
        if kept and not kept[-1].endswith("\n"):
            kept[-1] += "\n"
        kept += [f"{line}\n" for line in (begin, *lines, end)]
    return "".join(kept)


def block_lines(table: str, home: Path) -> list[str]:
    """The lines of this home's block (the marks left out)."""
    return _split(table, home)[1]


def check_block(home: Path) -> str | None:
    """For `spex doctor`: why this home's block of the user's crontab cannot
    be edited (a mark without its pair), or None (a whole block or none, no
    crontab, or no `crontab` to ask)."""
    if shutil.which("crontab") is None:
        return None
    try:
        table = read_crontab()
    except (Failed, Refused):
        return None
    try:
        _split(table, home)
    except Failed as e:
        return e.line()
    return None


def _run(argv: list[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`argv`, bounded in time. Its text is bytes decoded as they are (UTF-8,
    undecodable bytes kept as surrogates) with no newline translation: a
    crontab read and written back keeps its CRLF and its Latin-1 comment."""
    try:
        r = subprocess.run(
            argv,
            input=None if stdin is None else stdin.encode("utf-8", "surrogateescape"),
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise Refused(f"{argv[0]} is not installed", hint=_missing_hint(argv[0])) from None
    except subprocess.TimeoutExpired:
        raise Failed(f"{' '.join(argv[:3])} did not answer in {COMMAND_TIMEOUT:g} s") from None
    out, err = (b.decode("utf-8", "surrogateescape") for b in (r.stdout, r.stderr))
    return subprocess.CompletedProcess(r.args, r.returncode, out, err)


def _missing_hint(command: str) -> str:
    if command == "crontab":
        return "install cron (apt-get install cron), or run where systemctl --user works"
    return "see spex doctor"


def _first_line(r: subprocess.CompletedProcess[str]) -> str:
    text = (r.stderr or r.stdout or "").strip().splitlines()
    return clip(text[0], 200) if text else f"exit {r.returncode}"


def read_crontab() -> str:
    """The user's crontab (empty when there is none)."""
    r = _run(["crontab", "-l"])
    if r.returncode == 0:
        return r.stdout
    if "no crontab for" in r.stderr:
        return ""
    raise Failed(f"crontab -l failed: {_first_line(r)}")


def write_crontab(table: str) -> None:
    """Install `table`; an empty one removes the user's crontab (`crontab -r`),
    as it was before spex wrote one."""
    if not table.strip():
        r = _run(["crontab", "-r"])
        if r.returncode != 0 and "no crontab for" not in r.stderr:
            raise Failed(f"crontab -r failed: {_first_line(r)}")
        return
    r = _run(["crontab", "-"], stdin=table)
    if r.returncode != 0:
        raise Failed(f"crontab refused the new table: {_first_line(r)}", hint="see crontab(5)")


@contextlib.contextmanager
def crontab_lock() -> Iterator[None]:
    """Held around every read-modify-write of the user's crontab: one per
    user (not per state home), since every home edits the same table. In
    `$TMPDIR/spexsup-UID/` (0700, checked to be the user's own)."""
    directory = Path(tempfile.gettempdir()) / f"spexsup-{os.geteuid()}"
    ensure_private_dir(directory)
    fd = os.open(directory / "crontab.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def cron_sync(home: Path, firings: Sequence[Firing]) -> None:
    """Make this home's block of the user's crontab hold exactly `firings`
    (no block when there are none), leaving every other line be. Nothing is
    written when the block already says so. The caller holds `crontab_lock`
    from its read of what the block should hold until that is recorded."""
    lines = [line for f in firings for line in _entry_lines(f)]
    table = read_crontab()
    new = replace_block(table, home, lines)
    if new != table:
        write_crontab(new)


def _entry_lines(firing: Firing) -> list[str]:
    return [f"# {firing.schedule}: wake {firing.session}", cron_line(firing)]


def cron_daemon() -> int | None:
    """The pid of a running cron daemon (`cron`, `crond`), if any is seen."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() in ("cron", "crond"):
                return int(entry.name)
    return None


# --- systemd -----------------------------------------------------------------------

UNIT_PREFIX = "spexsup-"


def unit_name(schedule: str) -> str:
    """The units' name, without the suffix: `spexsup-<schedule id>`."""
    return f"{UNIT_PREFIX}{schedule}"


def unit_dir() -> Path:
    """Where the user's systemd units live: $XDG_CONFIG_HOME/systemd/user."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def _unit_word(word: str, *, command: bool) -> str:
    """One word quoted for a unit file: `%` is a specifier and `$` (in a
    command line) a variable, so both are doubled; backslashes and quotes
    escaped inside double quotes."""
    word = _checked_text(word, "a unit's word")
    word = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if command:
        word = word.replace("$", "$$")
    return f'"{word}"'


def _calendar_values(values: set[int], full: range, names: Sequence[str] | None = None) -> str:
    """A set of values as systemd's calendar writes it: `*`, or a list of
    values and `A..B` ranges (names for weekdays)."""
    if set(full) <= values:
        return "*"
    ordered = sorted(values)
    runs: list[tuple[int, int]] = []
    for v in ordered:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))

    def word(v: int) -> str:
        return names[v] if names is not None else f"{v:02d}"

    return ",".join(word(a) if a == b else f"{word(a)}..{word(b)}" for a, b in runs)


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def on_calendar(cron: str) -> list[str]:
    """The expression as systemd `OnCalendar=` values, firing at the same
    minutes: one value, or two when cron's day-of-month and day-of-week are
    both restricted (cron fires on either; one systemd value needs both)."""
    from cronsim import CronSim

    c = CronSim(cron, datetime.now(UTC))
    # cron's weekday 0 and 7 are Sunday; systemd counts Monday first.
    weekdays = {(d - 1) % 7 for d in c.weekdays if isinstance(d, int)}
    minutes = _calendar_values(c.minutes, range(60))
    hours = _calendar_values(c.hours, range(24))
    days = _calendar_values(c.days, range(1, 32))
    months = _calendar_values(c.months, range(1, 13))
    dow = _calendar_values(weekdays, range(7), _WEEKDAYS)
    clock = f"{hours}:{minutes}:00"
    if c.day_and or dow == "*" or days == "*":
        prefix = "" if dow == "*" else f"{dow} "
        return [f"{prefix}*-{months}-{days} {clock}"]
    return [f"*-{months}-{days} {clock}", f"{dow} *-{months}-* {clock}"]


def render_units(firing: Firing) -> dict[str, str]:
    """The `.service` (a oneshot that runs the firing, output appended to its
    log) and the `.timer` (its calendar, to the second, no catch-up of a
    missed firing: as cron) of one schedule, by file name."""
    what = f"spex schedule {firing.schedule}: wake {firing.session} ({firing.cadence.describe()})"
    what = what.replace("%", "%%")
    log = _checked_text(str(firing.log), "the log").replace("%", "%%")
    env = "".join(f"Environment={_unit_word(f'{k}={v}', command=False)}\n" for k, v in firing.env)
    command = " ".join(_unit_word(w, command=True) for w in firing.argv)
    service = (
        f"[Unit]\nDescription={what}\n\n"
        f"[Service]\nType=oneshot\n{env}ExecStart={command}\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n"
    )
    calendars = "".join(f"OnCalendar={c}\n" for c in on_calendar(firing.cadence.cron))
    timer = (
        f"[Unit]\nDescription={what}\n\n"
        f"[Timer]\n{calendars}AccuracySec=1s\nPersistent=false\nUnit={firing.unit}.service\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    return {f"{firing.unit}.service": service, f"{firing.unit}.timer": timer}


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(["systemctl", "--user", *args])


def _systemctl_ok(*args: str) -> None:
    r = _systemctl(*args)
    if r.returncode != 0:
        raise Failed(f"systemctl --user {' '.join(args)} failed: {_first_line(r)}")


def systemd_install(firing: Firing) -> None:
    """Write the units, reload the user manager, enable and start the timer;
    on a failure, take the units away again and raise it."""
    directory = unit_dir()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for name, text in render_units(firing).items():
            write_atomic(directory / name, text.encode())
            written.append(directory / name)
        _systemctl_ok("daemon-reload")
        _systemctl_ok("enable", "--now", f"{firing.unit}.timer")
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        with contextlib.suppress(Failed, Refused):
            _systemctl("daemon-reload")
        raise


def systemd_remove(schedule: str) -> None:
    """Stop and disable the timer, delete both units, reload. A timer the
    manager no longer knows is not an error: its files go all the same."""
    unit = unit_name(schedule)
    r = _systemctl("disable", "--now", f"{unit}.timer")
    if r.returncode != 0 and not re.search(r"not (be )?(found|loaded)|does not exist", r.stderr):
        raise Failed(f"systemctl --user disable --now {unit}.timer failed: {_first_line(r)}")
    for suffix in (".timer", ".service"):
        (unit_dir() / f"{unit}{suffix}").unlink(missing_ok=True)
    _systemctl_ok("daemon-reload")


# --- which engine ------------------------------------------------------------------


def systemd_works() -> tuple[bool, str]:
    """Whether a systemd user manager answers (`systemctl --user
    show-environment`, bounded), and what was found."""
    if shutil.which("systemctl") is None:
        return False, "systemctl is not installed"
    try:
        r = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False, f"systemctl --user did not answer in {PROBE_TIMEOUT:g} s"
    if r.returncode != 0:
        return False, f"systemctl --user does not work here ({_first_line(r)})"
    return True, "systemctl --user works"


def choose_engine() -> str:
    """The engine a new schedule uses: SPEXSUP_SCHEDULE_ENGINE, else systemd
    where `systemctl --user` works, else cron where `crontab` is installed;
    Refused naming what is missing when neither is there."""
    forced = os.environ.get(ENGINE_VAR, "").strip()
    if forced:
        if forced not in ENGINES:
            raise Invalid(
                f"invalid {ENGINE_VAR} {clip(repr(forced))}", hint=f"one of: {', '.join(ENGINES)}"
            )
        return forced
    works, why = systemd_works()
    if works:
        return "systemd"
    if shutil.which("crontab") is not None:
        return "cron"
    raise Refused(
        f"no engine for schedules: {why}, and crontab is not installed",
        hint="install cron (apt-get install cron) or run where a systemd user manager runs",
    )


def engine_report() -> tuple[bool, str]:
    """For `spex doctor`: which engine schedules use, and whether it fires."""
    try:
        engine = choose_engine()
    except (Invalid, Refused) as e:
        return False, e.line()
    forced = f" (chosen by {ENGINE_VAR})" if os.environ.get(ENGINE_VAR, "").strip() else ""
    if engine == "systemd":
        return True, f"systemd user timers{forced}: units in {unit_dir()}"
    where = shutil.which("crontab")
    if where is None:
        return False, f"cron{forced}: crontab is not installed ({_missing_hint('crontab')})"
    pid = cron_daemon()
    if pid is None:
        return False, (
            f"cron{forced}: {where}, but no cron daemon is running: schedules will not fire"
            " (service cron start)"
        )
    return True, f"cron{forced}: {where}, cron daemon pid {pid}"
