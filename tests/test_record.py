"""A Record is the class typing.NamedTuple makes, less typing's field checks
(spexsup.record): the same fields, defaults, methods, docstring, tuple
behaviour and refusals, built side by side from one class body."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any, NamedTuple

import pytest

from spexsup.adapters.login import Login
from spexsup.record import Record


class Made(Record):
    """A record of this test."""

    turn: str
    rc: int | None = None
    flags: tuple[str, ...] = ()

    def failed(self) -> bool:
        return self.rc not in (None, 0)

    @property
    def shown(self) -> str:
        return f"{self.turn}:{self.rc}"


class Typed(NamedTuple):
    """A record of this test."""

    turn: str
    rc: int | None = None
    flags: tuple[str, ...] = ()

    def failed(self) -> bool:
        return self.rc not in (None, 0)

    @property
    def shown(self) -> str:
        return f"{self.turn}:{self.rc}"


def test_a_record_is_what_namedtuple_makes_of_the_same_body() -> None:
    kinds: tuple[Any, ...] = (Made, Typed)  # (mypy narrows a record compared to a tuple)
    for cls in kinds:
        one = cls("t1", 2)
        assert one == ("t1", 2, ()) and one.failed() and one.shown == "t1:2"
        assert cls._fields == ("turn", "rc", "flags")
        assert cls._field_defaults == {"rc": None, "flags": ()}
        assert one._replace(rc=0) == cls("t1", 0) and not cls("t1", 0).failed()
        assert one._asdict() == {"turn": "t1", "rc": 2, "flags": ()}
        assert cls.__doc__ == "A record of this test."
        assert repr(one) == f"{cls.__name__}(turn='t1', rc=2, flags=())"
        assert cls.__module__ == __name__ and cls.__qualname__ == cls.__name__
        assert issubclass(cls, tuple) and hash(one) == hash(("t1", 2, ()))
        with pytest.raises(AttributeError):
            one.rc = 5
        with pytest.raises(TypeError):
            cls()
    assert list(Made.__annotations__) == list(Typed.__annotations__)


def test_a_record_refuses_what_namedtuple_refuses() -> None:
    with pytest.raises(TypeError, match="without a default follows"):

        class Late(Record):
            first: int = 1
            second: int  # type: ignore[misc]

    with pytest.raises(AttributeError, match="_replace"):

        class Mine(Record):
            value: int

            def _replace(self) -> None:  # type: ignore[misc]
                pass


def test_a_record_of_the_package_pickles_as_a_namedtuple_does() -> None:
    login = Login("/usr/bin", "/bin/bash -il", 0.5, True)
    assert pickle.loads(pickle.dumps(login)) == login


def test_making_a_record_compiles_none_of_its_annotations() -> None:
    """What the Record is for: typing.NamedTuple compiles each string
    annotation into a ForwardRef as it makes the class."""
    probe = """
import builtins, sys
from spexsup.record import Record
compiled = []
real = builtins.compile
builtins.compile = lambda source, *a, **k: (compiled.append(source), real(source, *a, **k))[1]
namespace = {"__name__": "probe"}
exec(real('''
from __future__ import annotations
class R(Record):
    a: dict[str, int] | None = None
    b: tuple[str, ...] = ()
''', "probe", "exec"), {"Record": Record, **namespace})
print(len([c for c in compiled if c in ("dict[str, int] | None", "tuple[str, ...]")]))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out
    typed = probe.replace(
        "from spexsup.record import Record", "from typing import NamedTuple as Record"
    )
    out = subprocess.run([sys.executable, "-c", typed], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2", out  # the probe sees typing's compiles
