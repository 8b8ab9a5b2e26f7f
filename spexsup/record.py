"""`Record`: a class of named fields, as `typing.NamedTuple` is to mypy, made
at run time by `collections.namedtuple` without typing's checks.

`typing.NamedTuple` checks each field's type as it makes the class; with
`from __future__ import annotations` every type is a string, which it
compiles into a ForwardRef: a compile() per field, 3-5 ms of every `spex`
start over the package's records, for a check nothing reads (mypy --strict
checks the types, and nothing here evaluates a record's annotations). A
Record's class is the one NamedTuple makes less those checks: the
collections.namedtuple of its fields and defaults, with the class body's
docstring, methods and constants, its `__annotations__` the strings as
written.

    class Price(Record):
        input: float
        output: float = 0.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Record"]

if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    import collections

    # What the class body may not define (collections.namedtuple's own), and
    # what it defines that is not copied onto the class: as typing has them.
    _PROHIBITED = frozenset(
        {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
         "_make", "_replace", "_asdict", "_source"}
    )  # fmt: skip
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _Maker(type):
        def __new__(cls, typename: str, bases: tuple[type, ...], ns: dict[str, Any]) -> type:
            if not bases:  # Record itself
                return super().__new__(cls, typename, bases, ns)
            if bases != (Record,):
                raise TypeError(f"{typename}: a Record's one base is Record")
            fields = list(ns.get("__annotations__", {}))
            defaults = []
            for name in fields:
                if name in ns:
                    defaults.append(ns[name])
                elif defaults:
                    raise TypeError(
                        f"{typename}: field {name} without a default follows one with a default"
                    )
            made = collections.namedtuple(
                typename, fields, defaults=defaults, module=ns["__module__"]
            )
            made.__annotations__ = dict(ns.get("__annotations__", {}))
            for key, value in ns.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"{typename}: cannot overwrite attribute {key}")
                if key not in _SPECIAL and key not in fields:
                    setattr(made, key, value)
            return made

    class Record(metaclass=_Maker):
        pass
