"""Many frozen records at once, a field at a time: the compiler's point records (10^5
client points' params and Benchmarks) built without the frozen constructor's per-field
stores. Only the compile builds records so (specc/compile/lower.py)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from typing import Any
from dataclasses import MISSING, fields

from specc.plan import Params
from specc.records import Record


def build_many(cls, count: int, varying: dict[str, list], shared: dict | None = None) -> list:
    """`count` records of `cls`, each field set from `varying` (a list with one value per
    record) or `shared` (one value for all), else its default: what `cls(**fields)` gives,
    in a fraction of the time (10^5 client points' params records: the frozen constructor
    sets each of 33 fields through object.__setattr__). Only for records whose
    construction checks and converts nothing: Params, and records without float fields
    or checks (Benchmark: a float field left at its default converts nothing)."""
    shared = shared or {}
    post = cls.__post_init__
    if not (post is Params.__post_init__ or (
            post is Record.__post_init__ and cls._check is Record._check
            and not any(f.type in ("float", "float | None") for f in fields(cls)
                        if f.name in varying or f.name in shared))):
        raise TypeError(f"{cls.__name__} is built by its constructor (it checks or converts)")
    names = {f.name: f for f in fields(cls)}
    unknown = sorted((varying.keys() | shared.keys()) - names.keys())
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    columns: list[Iterable[Any]] = []
    for name, f in names.items():
        if name in varying:
            given = varying[name]
            if len(given) != count:
                raise ValueError(f"{name}: {len(given)} values for {count} records")
            column: Iterable[Any] = given
        elif name in shared:
            column = itertools.repeat(shared[name], count)
        elif f.default is not MISSING:
            column = itertools.repeat(f.default, count)
        else:
            raise TypeError(f"{cls.__name__}: no value for {name!r}")
        columns.append(column)
    return list(map(_filler(cls), *columns)) if columns else []


@functools.cache
def _filler(cls):
    """A function (field values, in order) -> a `cls` record. It fills an instance of a
    twin class with the same slots, whose plain attribute stores are the interpreter's
    fastest, then makes the instance a `cls` (same layout: Python allows the switch), so
    the frozen record is never written to after it is one."""
    if not cls.__dict__.get("__slots__"):
        raise TypeError(f"{cls.__name__} has no slots")
    twin = type(f"_Filling{cls.__name__}", cls.__bases__, {"__slots__": cls.__slots__})
    names = [f.name for f in fields(cls)]
    source = (f"def fill({', '.join(names)}):\n    record = new(twin)\n"
              + "".join(f"    record.{n} = {n}\n" for n in names)
              + "    record.__class__ = cls\n    return record\n")
    scope = {"new": object.__new__, "twin": twin, "cls": cls}
    exec(source, scope)   # names are the dataclass's own field names (identifiers)
    return scope["fill"]
