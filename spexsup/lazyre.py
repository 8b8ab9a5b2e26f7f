"""Regular expressions compiled when first used, not when their module is imported.

`re.compile` at import time cost every command its patterns (about 2.5 ms
of `spex ls`, most of them for paths the command never takes: the
renderer's, the duration grammar's). `compile` here keeps the source and
compiles on the first match, once per process; the pattern methods spex
uses are the same as `re.Pattern`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, AnyStr, Generic


class LazyPattern(Generic[AnyStr]):
    """`re.compile(source, flags)`, done on first use."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: AnyStr, flags: int = 0) -> None:
        self._source: AnyStr = source
        self._flags = flags
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> re.Pattern[AnyStr]:
        # Two threads may both compile it: the same pattern either way.
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    @property
    def pattern(self) -> AnyStr:
        return self._source

    def fullmatch(self, string: AnyStr) -> re.Match[AnyStr] | None:
        return self.compiled.fullmatch(string)

    def match(self, string: AnyStr) -> re.Match[AnyStr] | None:
        return self.compiled.match(string)

    def search(self, string: AnyStr, pos: int = 0) -> re.Match[AnyStr] | None:
        return self.compiled.search(string, pos)

    def findall(self, string: AnyStr) -> list[Any]:  # (as typeshed's: str or tuples)
        return self.compiled.findall(string)

    def finditer(self, string: AnyStr) -> Iterator[re.Match[AnyStr]]:
        return self.compiled.finditer(string)

    def sub(self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr) -> AnyStr:
        return self.compiled.sub(repl, string)


def compile(source: AnyStr, flags: int = 0) -> LazyPattern[AnyStr]:
    """A pattern compiled on its first use (see the module's docstring)."""
    return LazyPattern(source, flags)
