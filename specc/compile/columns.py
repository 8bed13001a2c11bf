"""JSON text of many objects with the same keys, a column at a time.

A sweep's client points (10^5 on one server) share most of their values: each point's
plan.json entry and the canonical text its id hashes differ from the next one in a few
keys. Encoding them one object at a time spent most of a compile in the JSON encoder;
here each key's column is looked at once: a value every object shares is encoded once
into a template, the varying values are encoded once per distinct value, and each
object's text is the template filled in. The text is exactly what the encoder gives the
object as a dict (tests/test_columns.py checks it against json.dumps).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import final


@final   # never subclassed: `type(c) is Same` tells the type checker both ways
class Same:
    """A column whose every row holds one value."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Same({self.value!r})"


@final
class Encoded:
    """A column given as each row's JSON text already (a list, or an iterator read once)."""

    __slots__ = ("texts",)

    def __init__(self, texts):
        self.texts = texts


#: A row's value that leaves its key out of that row's object.
ABSENT = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()

#: A column: one value per row, or Same(value) for all of them.
Column = Sequence | Same


def same(column: Column):
    """The value every row of `column` holds as one JSON text would show it, or ABSENT when
    the rows differ. Equal values of different types (1, 1.0, True) or signs (0.0, -0.0)
    are different texts: only values JSON spells one way count as the same."""
    if type(column) is Same:
        return column.value
    if not column:
        return ABSENT
    first = column[0]
    if column.count(first) != len(column):   # identity first, then ==: C speed
        return ABSENT
    kind = type(first)
    if kind in (str, type(None)) or first is ABSENT:
        return first
    if len(set(map(type, column))) != 1:
        return ABSENT
    if kind is float and first == 0.0 and len(set(map(repr, column))) != 1:
        return ABSENT
    if kind not in (int, bool, float) and any(v is not first for v in column):
        return ABSENT   # a container or record: equal ones may hold 1 and 1.0
    return first


def texts(column: Sequence, encode: Callable[[object], str],
          encode_str: Callable[[str], str] | None = None) -> tuple[Iterable[str], Sequence]:
    """(each row's value as `encode` writes it, each distinct value encoded once; the texts
    a check of them for what scrub looks for must read). `encode_str` is what `encode`
    does to a str, called directly on a column of strings. Ints and strings are encoded as
    the rows are read (a text per row is not held: 10^5 ids); what escaping a string adds
    is nothing a check looks for, so its raw values stand for its texts."""
    kinds = set(map(type, column))
    if kinds == {int}:   # json writes an int as its repr: each distinct one's, once
        distinct = dict.fromkeys(column)
        if len(distinct) * 4 > len(column):
            return map(int.__repr__, column), []
        return map({v: int.__repr__(v) for v in distinct}.__getitem__, column), []
    if kinds == {str} and encode_str is not None:
        return map(encode_str, column), column
    if kinds == {str, type(None)} and encode_str is not None:   # e.g. each point's baseline
        runs = itertools.groupby(column, type)   # a server's points: all None, or all ids
        return itertools.chain.from_iterable(
            map(encode_str, run) if kind is str else itertools.repeat("null", len(list(run)))
            for kind, run in runs), list(filter(None, column))
    cache: dict = {}

    def one(value) -> str:
        # by identity: a sweep's rows hold the same few objects; equal objects of other
        # types or signs (1 and 1.0, 0.0 and -0.0) are never taken for one another
        key = id(value)
        got = cache.get(key)
        if got is None:
            got = cache[key] = (value, encode(value))
        return got[1]
    encoded = list(map(one, column))
    return encoded, encoded


class Objects:
    """Each row's object, `{"key":value,...}` with the fields in the order given, exactly as
    `encode(dict)` writes it with separators (",", ":"); iterate for the rows' texts (made
    as they are read).

    A value ABSENT leaves its key out of that row; `omit` maps keys to a value that does
    the same (a field written only when it is not its default: `value == default`).
    `escape` is applied to each row's whole text, as cheaply as to its parts: escaping a
    text character by character (a JSON string's body) escapes its pieces one by one.
    `around`: text before and after each row's (as it is)."""

    def __init__(self, fields: Sequence[tuple[str, Column | Encoded]], rows: int, *,
                 encode: Callable[[object], str], encode_str: Callable[[str], str],
                 omit: dict | None = None, escape: Callable[[str], str] | None = None,
                 around: tuple[str, str] = ("", "")):
        omit = omit or {}
        esc = escape or (lambda text: text)
        str_text: Callable[[str], str] | None
        value_text, str_text = encode, encode_str
        if escape is not None:
            value_text = lambda value: escape(encode(value))   # noqa: E731
            str_text = None   # each distinct string escaped once, not each row's
        pieces: list = []   # (key, fixed text, None) or (key, None, (row values, how many ABSENT))
        for key, column in fields:
            if type(column) is Encoded:
                pieces.append((key, None, column))
                continue
            value = same(column)
            if value is not ABSENT and not (key in omit and value == omit[key]):
                pieces.append((key, encode(value), None))
            elif type(column) is not Same:
                values = column if type(column) is list else list(column)
                if key in omit:
                    default = omit[key]
                    values = [ABSENT if v == default else v for v in values]
                absent = values.count(ABSENT)
                if absent < len(values):
                    pieces.append((key, None, (values, absent)))
        parts: list = []   # the row's text: fixed text, and None where a row's own goes
        self._varying: list = []   # per None in parts: each row's text (or made as read)
        #: per None in parts, what untouched() checks: texts (strings' raw values: escaping
        #: them adds nothing a check looks for), nested Objects, or None: unknown
        self._checks: list = []
        self._strip = False        # the first key is left out of some rows: strip its comma
        self._comma = comma = esc(",")
        for k, (key, fixed, values) in enumerate(pieces):
            prefix = esc(("," if k else "") + encode_str(key) + ":")
            if fixed is not None:
                parts.append(prefix + esc(fixed))
                continue
            if type(values) is Encoded:
                parts += [prefix, None]
                self._varying.append(values.texts if escape is None
                                     else map(escape, values.texts))
                self._checks.append(values.texts if isinstance(values.texts, Objects)
                                    else None)
                continue
            values, absent = values
            present = [v for v in values if v is not ABSENT] if absent else values
            encoded, checked = texts(present, value_text, str_text)
            self._checks.append(checked)
            if not absent:
                parts += [prefix, None]
                self._varying.append(encoded)
                continue
            if k == 0:
                prefix, self._strip = comma + prefix, True
            encoded = iter(encoded)
            self._varying.append([prefix + next(encoded) if v is not ABSENT else ""
                                  for v in values])
            parts.append(None)
        # fixed runs joined: ["{...", None, "...", None, "...}"]
        self._parts: list = []
        for part in [around[0] + "{", *parts, "}" + around[1]]:
            if part is not None and self._parts and self._parts[-1] is not None:
                self._parts[-1] += part
            else:
                self._parts.append(part)
        self._rows = rows

    def untouched(self, check: Callable[[str], bool]) -> bool:
        """Whether `check` passes the template's text and every row's texts (each varying
        column's at once): then it passes each row, if what it looks for cannot straddle
        a value's edge (a value's text starts and ends with its own JSON: `"`, a digit,
        a bracket, a letter of true/false/null, and sits between `:` and `,` or `}`)."""
        for texts_ in self._checks:
            if texts_ is None:
                return False
            if isinstance(texts_, Objects):
                if not texts_.untouched(check):
                    return False
            elif not all(check("\x00".join(texts_[at:at + 4096]))   # a few at once
                         for at in range(0, len(texts_), 4096)):
                return False
        return check("\x00".join(p for p in self._parts if p is not None))

    def __iter__(self) -> Iterator[str]:
        varying = iter(self._varying)
        pieces = [itertools.repeat(p) if p is not None else next(varying) for p in self._parts]
        lines: Iterator[str]
        if len(pieces) == 1:
            lines = itertools.repeat(self._parts[0], self._rows)
        else:   # joined (not %-formatted: a template is parsed again for every row)
            lines = map("".join, zip(*pieces))
        if not self._strip:
            return lines
        comma, at = self._comma, len(self._parts[0])   # the comma after the opening brace
        return (text if not text.startswith(comma, at) else text[:at] + text[at + len(comma):]
                for text in lines)


def object_texts(fields: Sequence[tuple[str, Column]], rows: int, **how) -> Iterator[str]:
    """The rows' texts of `Objects(fields, rows, **how)`."""
    return iter(Objects(fields, rows, **how))


class RecordColumns:
    """Records (frozen, hashable) of many entries, a field at a time: each distinct record
    once (a point's params, shared by its servers, is read once); each field Same(value) or
    a list over the distinct records, first seen first; `index`: each entry's record among
    them (None: every entry its own, in order); `of`: the entries these describe (a
    reader checks it is given the same object); `entries`: some of the entries' own fields
    the same way (a benchmark's server...: reading them back from 10^5 records costs)."""

    def __init__(self, columns: dict[str, Column], index: list[int] | None, of=None,
                 entries: RecordColumns | None = None):
        self.columns, self.index, self.of, self.entries = columns, index, of, entries

    @classmethod
    def read(cls, records: Sequence, names: Sequence[str], of=None) -> RecordColumns:
        """Read back from the records themselves."""
        ids = list(map(id, records))
        where: dict = dict.fromkeys(ids)   # first seen first
        index = None
        if len(where) < len(ids):
            records = list(dict(zip(ids, records)).values())
            where = dict(zip(where, range(len(where))))
            index = list(map(where.__getitem__, ids))
        del ids, where
        out: dict = {}
        for name in names:
            column = list(map(operator.attrgetter(name), records))
            value = same(column)
            out[name] = column if value is ABSENT else Same(value)
        return cls(out, index, of)

    def per_entry(self) -> list[tuple[str, Column]]:
        """(field, its column) with a value per entry (or Same)."""
        if self.index is None:
            return list(self.columns.items())
        return [(k, c if type(c) is Same else list(map(c.__getitem__, self.index)))
                for k, c in self.columns.items()]
