"""Prompt sets by category: the shipped set, MT-Bench, Spec-Bench, SPEED-Bench, a hub id."""

import json
import sys

import pytest

from specc.prompts import promptsets
from specc.prompts.datasets import DatasetError, load_prompts
from specc.prompts.promptsets import (SPEED_PLACEHOLDER, CategoryError, DatasetFormatError,
                                  HubError, load, sequence)

CATS = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_shipped_set_has_ten_prompts_in_each_of_eight_categories():
    ps = load("specc", path=None, output_len=64)
    assert promptsets.categories_of(ps) == CATS
    for c in CATS:
        mine = [p for p in ps if p.category == c]
        assert len(mine) == 10
        assert len({p.id for p in mine}) == 10
        assert len({p.text for p in mine}) == 10
    assert all(p.output_tokens == 64 and p.input_tokens == len(p.text.split()) for p in ps)
    assert promptsets.SHIPPED.is_file()


def test_shipped_set_is_the_default_dataset_and_round_robins_categories():
    ps = load_prompts("specc", num=16, input_len=1, output_len=32)
    assert [p.category for p in ps[:8]] == CATS
    assert [p.category for p in ps[8:]] == CATS
    assert ps[0].id == "writing-01" and ps[8].id == "writing-02"
    # more requests than prompts: the set starts again, in the same order
    many = load_prompts("specc", num=170, input_len=1, output_len=32)
    assert many[80:160] == many[:80] and many[160] == many[0]


def test_sequence_is_deterministic_for_matched_points():
    a = load_prompts("specc", num=40, input_len=1, output_len=32, seed=1)
    b = load_prompts("specc", num=40, input_len=1, output_len=32, seed=9)
    assert a == b   # the category sets are not shuffled: same prompts, same order


def test_category_filter_and_missing_category():
    ps = load_prompts("specc", num=5, input_len=1, output_len=8, categories=["math", "coding"])
    assert [p.category for p in ps] == ["math", "coding", "math", "coding", "math"]
    with pytest.raises(CategoryError, match=r"no prompts in category 'poetry'.*it has: writing"):
        load("specc", path=None, output_len=8, categories=["poetry"])
    with pytest.raises(DatasetError, match="no categories"):
        load_prompts("random", num=2, input_len=4, output_len=4, categories=["math"])


def test_mt_bench_question_jsonl(tmp_path):
    p = _jsonl(tmp_path / "question.jsonl", [
        {"question_id": 81, "category": "writing", "turns": ["Tell a story.", "Shorter."]},
        {"question_id": 111, "category": "math", "turns": ["What is 2+2?", "And 3+3?"],
         "reference": ["4", "6"]},
        # the Hugging Face copy names the turns "prompt"
        {"question_id": 121, "category": "coding", "prompt": ["Write a loop.", "In C."]},
    ])
    ps = load("mt_bench", path=p, output_len=16)
    assert [(p.id, p.category, p.text) for p in ps] == [
        ("81", "writing", "Tell a story."), ("111", "math", "What is 2+2?"),
        ("121", "coding", "Write a loop.")]


def test_spec_bench_categories(tmp_path):
    p = _jsonl(tmp_path / "question.jsonl", [
        {"question_id": i, "category": c, "turns": [f"question {i}"]}
        for i, c in enumerate(["mt_bench", "translation", "summarization", "qa",
                               "math_reasoning", "rag"])])
    ps = load("spec_bench", path=p, output_len=16, categories=["qa", "rag"])
    assert [(p.category, p.id) for p in ps] == [("qa", "3"), ("rag", "5")]


def test_not_the_named_format(tmp_path):
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(DatasetFormatError, match=r"sharegpt.json:1: not a MT-Bench.*got a JSON list \(a ShareGPT"):
        load("mt_bench", path=str(share), output_len=8)
    plain = _jsonl(tmp_path / "plain.jsonl", [{"prompt": "hello there"}])
    with pytest.raises(DatasetFormatError,
                       match=r"plain.jsonl:1: not a MT-Bench question.jsonl row: needs "
                             r"\"category\" and \"turns\".*got prompt"):
        load("mt_bench", path=plain, output_len=8)
    with pytest.raises(DatasetFormatError, match="not a specc prompt set row"):
        load("specc", path=plain, output_len=8)
    with pytest.raises(DatasetFormatError, match="SPEED-Bench"):
        load("speed_bench", path=plain, output_len=8)


def test_missing_file():
    with pytest.raises(DatasetError, match="no such file"):
        load("mt_bench", path="/nonexistent/question.jsonl", output_len=8)
    with pytest.raises(DatasetError, match="a path is required"):
        load("spec_bench", path=None, output_len=8)


def test_speed_bench_turns_messages_and_placeholders(tmp_path):
    qid = "0123456789abcdef0123456789abcdef"
    p = _jsonl(tmp_path / "qualitative.jsonl", [
        {"question_id": qid, "category": "coding", "sub_category": "x", "turns": ["def f():"],
         "source": "s", "src_id": "1", "difficulty": "easy", "multiturn": False},
        {"question_id": "b" * 32, "category": "rag", "turns": [SPEED_PLACEHOLDER]},
        {"question_id": "c" * 32, "category": "math",
         "messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "Integrate x."}]},
    ])
    ps = load("speed_bench", path=p, output_len=8)
    assert [(p.id, p.category, p.text) for p in ps] == [
        (qid, "coding", "def f():"), ("c" * 32, "math", "Integrate x.")]
    only = _jsonl(tmp_path / "throughput.jsonl",
                  [{"question_id": "d" * 32, "category": "mixed", "turns": [SPEED_PLACEHOLDER]}])
    with pytest.raises(DatasetError, match="placeholder.*prepare_data.py"):
        load("speed_bench", path=only, output_len=8)


def test_speed_bench_parquet_without_pyarrow(tmp_path, monkeypatch):
    f = tmp_path / "test-00000.parquet"
    f.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(HubError, match=r"needs pyarrow: pip install 'specc\[hf\]'"):
        load("speed_bench", path=str(f), output_len=8)
    with pytest.raises(DatasetFormatError, match="read as speed_bench only"):
        load("mt_bench", path=str(f), output_len=8)


def test_hf_without_datasets_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(HubError, match=r"needs the datasets library \(pip install 'specc\[hf\]'\)"
                                       r".*use a local file instead"):
        load("hf", path="nvidia/SPEED-Bench", output_len=8, hf_subset="qualitative")


def test_hf_hub_unreachable_names_the_local_file_alternative(monkeypatch):
    """The hub is not reachable from this machine (nor from CI): the real probe fails fast.
    A stand-in `datasets` module makes the test independent of the optional extra."""
    import types

    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda *a, **k: pytest.fail("must not be called when the hub is down")
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    # an endpoint that refuses at once, wherever the test runs
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    promptsets._load_cached.cache_clear()
    with pytest.raises(HubError) as e:
        load("hf", path="nvidia/SPEED-Bench", output_len=8, hf_subset="qualitative")
    msg = str(e.value)
    assert "not reachable" in msg and "127.0.0.1:9" in msg
    assert "benchmark.dataset=speed_bench" in msg and "benchmark.dataset_path=<file>" in msg
    assert "\n" not in msg


def test_hf_rows_are_read_like_files(monkeypatch):
    import types

    rows = [{"question_id": "q1", "category": "coding", "turns": ["Sort a list."]},
            {"instruction": "Summarise this."}]
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, subset, split: rows if (name, subset, split) == (
        "org/set", "qualitative", "test") else pytest.fail("wrong arguments")
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # read the cache: no probe
    promptsets._load_cached.cache_clear()
    ps = load("hf", path="org/set", output_len=8, hf_subset="qualitative")
    assert [(p.category, p.id, p.text) for p in ps] == [
        ("coding", "q1", "Sort a list."), ("all", "all-01", "Summarise this.")]


def test_sequence_round_robin_uneven_categories():
    from specc.prompts.datasets import Prompt

    ps = [Prompt("a", 1, 1, "x", "x1"), Prompt("b", 1, 1, "x", "x2"), Prompt("c", 1, 1, "y", "y1")]
    assert [p.id for p in sequence(ps, 5)] == ["x1", "y1", "x2", "x1", "y1"]
