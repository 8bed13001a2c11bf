"""The column-at-a-time JSON encoder writes exactly what json writes for each object:
plan.json's 10^5 point entries and the texts their ids hash go through it."""

import json
import math
import random

import pytest

from specc.compile.columns import ABSENT, Same, object_texts, same

COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)

#: Values that are equal but written differently, or written with characters that matter
#: to the encoder's template (%, quotes, non-ASCII).
POOL = [0, 1, 2, 1.0, 0.0, -0.0, 2.5, True, False, None, float("nan"), float("inf"), 10**30,
        "", "a", "a%sb", "%", "100%", '"q"', "ü", "\n", (1, 2), (1.0, 2), ("x", "y"), [1],
        {"k": 1}, {"k": 1.0}]


def _rows(rng, keys, n):
    """Rows of random values; some keys constant, some absent from some rows."""
    plan = {k: rng.choice(["same", "vary", "few", "absent-some", "absent-all"]) for k in keys}
    fixed = {k: rng.choice(POOL) for k in keys}
    few = {k: rng.sample(POOL, 2) for k in keys}
    out = []
    for _ in range(n):
        row = {}
        for k in keys:
            how = plan[k]
            if how == "same":
                row[k] = fixed[k]
            elif how == "vary":
                row[k] = rng.choice(POOL)
            elif how == "few":
                row[k] = rng.choice(few[k])
            elif how == "absent-some" and rng.random() < 0.5:
                row[k] = rng.choice(few[k])
        out.append(row)
    return out


def _columns(keys, rows):
    cols = []
    for k in keys:
        values = [r.get(k, ABSENT) for r in rows]
        cols.append((k, values))
    return cols


@pytest.mark.parametrize("seed", range(40))
def test_every_row_reads_as_json_writes_it(seed):
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(rng.randint(1, 7))]
    rows = _rows(rng, keys, rng.randint(1, 30))
    got = list(object_texts(_columns(keys, rows), len(rows), encode=COMPACT.encode,
                            encode_str=json.encoder.encode_basestring))
    assert got == [COMPACT.encode(r) for r in rows]
    # the canonical spelling: sorted keys, ASCII
    skeys = sorted(keys)
    got = list(object_texts(_columns(skeys, rows), len(rows), encode=CANONICAL.encode,
                            encode_str=json.encoder.encode_basestring_ascii))
    assert got == [CANONICAL.encode(r) for r in rows]
    # and as the body of a JSON string (what a point's id hashes)
    got = list(object_texts(_columns(skeys, rows), len(rows), encode=CANONICAL.encode,
                            encode_str=json.encoder.encode_basestring_ascii,
                            escape=lambda t: json.encoder.encode_basestring_ascii(t)[1:-1]))
    assert got == [CANONICAL.encode(CANONICAL.encode(r))[1:-1] for r in rows]


def test_a_key_left_out_at_its_default_and_a_column_every_row_shares():
    fields = [("a", ["x", "y", "z"]), ("b", [0, 3, 0]), ("c", Same(None))]
    got = list(object_texts(fields, 3, encode=COMPACT.encode,
                            encode_str=json.encoder.encode_basestring, omit={"b": 0, "c": None}))
    assert got == ['{"a":"x"}', '{"a":"y","b":3}', '{"a":"z"}']
    # the first key left out of some rows: no leading comma
    got = list(object_texts([("b", [0, 3]), ("a", Same("%"))], 2, encode=COMPACT.encode,
                            encode_str=json.encoder.encode_basestring, omit={"b": 0}))
    assert got == ['{"a":"%"}', '{"b":3,"a":"%"}']


def test_equal_values_json_writes_differently_are_not_one_value():
    assert same([1, 1.0]) is ABSENT
    assert same([True, 1]) is ABSENT
    assert same([0.0, -0.0]) is ABSENT
    assert same([(1,), (1.0,)]) is ABSENT
    assert same(["a", "a"]) == "a" and same([2, 2]) == 2
    nan = float("nan")
    assert math.isnan(same([nan, nan]))
