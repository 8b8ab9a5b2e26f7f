"""Durations: the one grammar for every time a user types or configures.

A bare number is seconds (`0.2`, `45`); otherwise numbers with a unit, `s`,
`m`, `h`, `d` or `w`, one after another and summed (`90s`, `1.5h`, `1h30m`,
`2w`). Whitespace around and between the parts is ignored; signs, exponents,
`nan` and `inf` are not durations. Every CLI option and config key that takes
a time goes through `parse`, so `--grace 1s`, `wait --timeout 10m` and
`window = "3s"` mean what they say everywhere. What is sensible differs per
option, so the bounds are the caller's, given as keyword arguments.
"""

from __future__ import annotations

import math

from spexsup import lazyre
from spexsup.errors import Invalid, clip

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
GRAMMAR = "a duration: 90s, 15m, 2h, 1h30m"
WEEK = UNITS["w"]

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
BARE = lazyre.compile(rf"\s*({_NUMBER})\s*")
_PARTS = lazyre.compile(rf"(?:\s*{_NUMBER}\s*[smhdw])+\s*")
_PART = lazyre.compile(rf"({_NUMBER})\s*([smhdw])")


def parse(
    value: str | float,
    what: str,
    *,
    minimum: float = 0.0,
    allow_zero: bool = False,
    maximum: float | None = WEEK,
) -> float:
    """`value` in seconds: a duration string, or a number of seconds as TOML gives it.

    `what` names the option or key in the message (`invalid --grace '1x'`).
    The result lies in [minimum, maximum] (no upper bound when maximum is
    None) and is 0 only with `allow_zero`; anything else is Invalid, one line
    with a hint.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (bare := BARE.fullmatch(value)):
        seconds = float(bare.group(1))
    elif isinstance(value, str) and _PARTS.fullmatch(value):
        seconds = sum(float(n) * UNITS[unit] for n, unit in _PART.findall(value))
    else:
        raise Invalid(f"invalid {what} {clip(repr(value))}", hint=GRAMMAR)
    if not math.isfinite(seconds):
        raise Invalid(f"invalid {what} {clip(repr(value))}", hint=GRAMMAR)
    too_big = maximum is not None and seconds > maximum
    if seconds < minimum or too_big or (seconds == 0 and not allow_zero):
        raise Invalid(
            f"invalid {what} {clip(repr(value))}",
            hint=bounds(minimum, allow_zero=allow_zero, maximum=maximum),
        )
    return seconds


def bounds(minimum: float = 0.0, *, allow_zero: bool = False, maximum: float | None = WEEK) -> str:
    """What `parse` accepts with these bounds, in words: `a duration from 0.05s to 1h`."""
    low = f"from {spell(minimum)}" if minimum > 0 or allow_zero else "more than 0"
    if maximum is None:
        return f"a duration {low}" if low != "from 0s" else "a duration, 0 or more"
    joint = " to " if low.startswith("from") else " and at most "
    return f"a duration {low}{joint}{spell(maximum)}"


def spell(seconds: float) -> str:
    """`seconds` the way the grammar writes it, days first: `1h30m`, `7d`, `0.05s`."""
    if seconds <= 0:
        return "0s"
    out = []
    left = seconds
    for unit in ("d", "h", "m"):
        count = int(left // UNITS[unit])
        if count:
            out.append(f"{count}{unit}")
            left -= count * UNITS[unit]
    if left > 1e-9 or not out:
        out.append(f"{round(left, 6):g}s")
    return "".join(out)


def span(seconds: float) -> str:
    """`90s`, `15m`, `2h`, `1h30m`: a time limit as a person writes it (`show`,
    `edit`, a timed-out turn's error); under a second in milliseconds (`1ms`,
    `250ms`), under ten with its fraction (`1.5s`), so no limit reads as `0h`."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        if ms < 1:
            return f"{ms:.2g}ms"
        return f"{round(ms)}ms" if round(ms) < 1000 else "1s"
    if seconds < 10 and seconds != round(seconds):
        return f"{seconds:.3g}s"
    seconds = round(seconds)
    if seconds < 120 and seconds % 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 120 and minutes % 60:
        return f"{minutes}m" + (f"{secs}s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h" + (f"{minutes}m" if minutes else "")
