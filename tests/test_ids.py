"""Ids are unique at any scale the compiler accepts: two points sharing an id would share
one result row and one requests file, the figures of one reported for both."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from specc.compile import lower
from specc.compile.matrix import expand
from specc.compile.pipeline import compile_config
from specc.engines import get_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from compile_speed import overrides as bench_overrides  # noqa: E402


def _repeats(ids) -> dict:
    return {i: n for i, n in Counter(ids).items() if n > 1}


@pytest.mark.parametrize("shape", ["server", "points"])
def test_the_benchmark_shapes_compile_with_unique_point_ids(compose, shape):
    """10^5 points on one server (~300 short-id collisions by chance) and on twelve: every
    id unique, the colliding ones written long, every other id as short as before."""
    result = compile_config(compose(bench_overrides(100_000, shape)))
    assert result.ok, result.diagnostics[:3]
    ids = [b.id for b in result.plan.benchmarks]
    assert len(ids) >= 100_000 and not _repeats(ids)
    lengths = Counter(len(i.rsplit("-", 1)[1]) for i in ids)
    assert set(lengths) <= {lower.SHORT_HASH, lower.LONG_HASH}
    if shape == "server":   # this shape's short ids do collide: the long form is in use
        assert 0 < lengths[lower.LONG_HASH] < 200
    assert not _repeats(s.id for s in result.plan.servers)


def test_twelve_thousand_servers_have_unique_ids(compose):
    """The servers shape at 10^5 points: 12,000 servers, whose 24-bit ids collide."""
    cfg = compose(bench_overrides(100_000, "servers"))
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    matrix, _ = expand(cfg, engine)
    sids = lower._server_ids(matrix.servers, engine)
    assert len(sids) == 12_000 and not _repeats(sids)
    assert all(len(s.rsplit("-", 1)[1]) in (lower.SHORT_HASH, lower.LONG_HASH) for s in sids)


def test_a_repeated_id_is_written_long_and_the_others_keep_their_short_form():
    ids = ["a-c1-abcdef", "a-c2-123456", "a-c1-abcdef"]
    assert lower._lengthen_repeats(ids, lambda i: f"long{i}") == ["long0", "a-c2-123456", "long2"]
    same = ["x", "y"]
    assert lower._lengthen_repeats(same, lambda i: "never") is same


def test_run_refuses_a_plan_whose_ids_repeat(run_specc, tmp_path):
    """A plan.json in which two points share an id (hand-edited, or from an older specc) is
    refused before anything launches: one line, exit 2."""
    code, _, err = run_specc(["+experiment=eagle3_sweep", "engine=sim"], tmp_path)
    assert code == 0, err
    plan_file = tmp_path / "run" / "plan.json"
    plan = json.loads(plan_file.read_text())
    first, second = plan["benchmarks"][0], plan["benchmarks"][1]
    second["id"] = first["id"]
    plan_file.write_text(json.dumps(plan))
    code, out, err = run_specc(["run", "--plan", str(plan_file)], tmp_path, run_dir=False)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error PLAN_UNREADABLE" in lines[0]
    assert f"benchmark id {first['id']!r} appears 2 times" in lines[0]
    assert not (tmp_path / "run" / "state.json").exists()
