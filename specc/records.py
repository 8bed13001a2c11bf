"""Records: frozen dataclasses read and written as JSON, and their one strict reader.

Every record type's field annotations are its schema. `to_json` / `from_json` are defined
once (on `Record`) and read strictly: a value that does not fit is a `RecordError` naming
the path (`servers[0].readiness.probe.path: missing`), never a KeyError. The bottom of the
layers (docs/architecture.md): plan.json's, manifest.json's and the tuner's records are
built on it, and it imports nothing of specc.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, Field, fields
from typing import Any


def _fields_of(record: Any) -> tuple[Field, ...]:
    """A record's (or record type's) dataclass fields: every Record subclass is a dataclass."""
    return fields(record)


class RecordError(ValueError):
    """A record file (plan.json, manifest.json) does not fit its schema; the message names
    the path in it and the problem."""


#: plan.json's name for it (one class: catching either catches both).
PlanError = RecordError


#: Per record type, its float fields (an int given for one is stored as a float).
_FLOAT_FIELDS: dict[type, tuple[str, ...]] = {}


class Record:
    """Base of every plan type: one `to_json` / `from_json`, driven by the annotations."""

    __slots__ = ()
    OMITTED_AT_DEFAULT: tuple = ()
    __dataclass_fields__: typing.ClassVar[dict[str, typing.Any]]   # every subclass is a dataclass

    def to_json(self) -> dict:
        return {f.name: _dump(getattr(self, f.name)) for f in _fields_of(self)
                if not (f.name in self.OMITTED_AT_DEFAULT and getattr(self, f.name) == f.default)}

    @classmethod
    def from_json(cls, data, path: str = ""):
        return _load(cls, data, path or cls.__name__)

    def _check(self) -> list[str]:
        """Problems a well-typed value can still have (a bad regex, a negative budget)."""
        return []

    def __post_init__(self):
        floats = _FLOAT_FIELDS.get(type(self))
        if floats is None:
            floats = _FLOAT_FIELDS[type(self)] = tuple(
                f.name for f in _fields_of(self) if f.type in ("float", "float | None"))
        for name in floats:   # 120 and 120.0 are one value: always written as a float
            value = getattr(self, name)
            if type(value) is int:
                object.__setattr__(self, name, float(value))
        problems = self._check()
        if problems:
            raise ValueError("; ".join(problems))


def _dump(x):
    if isinstance(x, Record):
        return x.to_json()
    if isinstance(x, (list, tuple)):
        return [_dump(v) for v in x]
    if isinstance(x, dict):
        return {k: _dump(v) for k, v in x.items()}
    return x


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


_HINTS: dict[type, dict] = {}


def _load(tp, value, path: str):
    """Read `value` as type `tp`; raise PlanError naming `path` on the first misfit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, Record):
        read = getattr(tp, "read", None)
        if read is not None:   # a flat record with its own one-pass reader (plan.Params)
            return read(value, path)
        if not isinstance(value, dict):
            raise PlanError(f"{path}: expected an object, got {_kind(value)}")
        hints = _HINTS.get(tp) or _HINTS.setdefault(tp, typing.get_type_hints(tp))
        names = {f.name for f in _fields_of(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise PlanError(f"{path}: unknown key {unknown[0]!r}")
        kwargs = {}
        for f in _fields_of(tp):
            if f.name in value:
                kwargs[f.name] = _load(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is MISSING and f.default_factory is MISSING:
                raise PlanError(f"{path}.{f.name}: missing")
        try:
            return tp(**kwargs)
        except ValueError as e:
            raise PlanError(f"{path}: {e}") from None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for kind in inner[:-1]:   # str | tuple[str, ...]: the first that fits
            try:
                return _load(kind, value, path)
            except PlanError:
                pass
        return _load(inner[-1], value, path)
    if origin is tuple or tp is tuple:
        if not isinstance(value, list):
            raise PlanError(f"{path}: expected a list, got {_kind(value)}")
        item = args[0] if args else typing.Any
        return tuple(_load(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise PlanError(f"{path}: expected an object, got {_kind(value)}")
        if not args:
            return value
        return {k: _load(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if tp is typing.Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise PlanError(f"{path}: expected true or false, got {_kind(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{path}: expected an integer, got {_kind(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(f"{path}: expected a number, got {_kind(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise PlanError(f"{path}: expected a string, got {_kind(value)}")
        return value
    raise TypeError(f"no schema for {tp!r} at {path}")   # pragma: no cover - a bug here
