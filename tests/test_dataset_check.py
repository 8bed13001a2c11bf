"""Datasets are checked at compile time (issue 22 item 4): jsonl and ShareGPT files that
would fail every request are refused before anything launches, one line each, read
streaming and bounded (a 200 MB prompt is not held)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from specc.prompts.datasets import MAX_PROMPT_BYTES, TokenCounter, check_file


def _jsonl(tmp_path, *objs, raw: bytes | None = None):
    p = tmp_path / "d.jsonl"
    p.write_bytes(raw if raw is not None else
                  b"".join(json.dumps(o).encode() + b"\n" for o in objs))
    return str(p)


def _check(path, kind="jsonl", output_len=16, context=2048):
    return check_file(kind, path, output_len=output_len, context_length=context)


@pytest.mark.parametrize("objs,raw,says", [
    ((), b"{not json\n", "bad JSON"),
    ((), b"", "dataset is empty"),
    ((), b"\x00\x01\x02binary", "binary data"),
    ((), b'{"prompt": "caf\xe9"}\n', "not UTF-8"),
    (({"text": 5},), None, 'needs a non-empty string "prompt"'),
    (({"prompt": "hi", "output_len": 0},), None, "'output_len' must be a positive integer, got 0"),
    (({"prompt": "hi", "max_tokens": 10**9},), None, "asks for 1000000000 output tokens, over "
                                                     "the context length 2048"),
    (({"prompt": "word " * 3000},), None, "prompt of 3000 tokens (estimated at one token per "
                                          "word"),
])
def test_a_jsonl_file_that_would_fail_every_request_is_refused(tmp_path, objs, raw, says):
    problems = _check(_jsonl(tmp_path, *objs, raw=raw))
    assert problems and says in problems[0], problems
    assert str(tmp_path) in problems[0]


def test_a_good_file_has_no_problems(tmp_path):
    assert _check(_jsonl(tmp_path, {"prompt": "a short prompt"}, {"text": "x", "max_tokens": 8})) == []


def test_no_output_len_anywhere_is_refused(tmp_path):
    problems = _check(_jsonl(tmp_path, {"prompt": "p"}), output_len=0)
    assert 'no "output_len"/"max_tokens" and benchmark.output_len is 0' in problems[0]


def test_a_200_mb_prompt_is_refused_without_being_held(tmp_path):
    """In a child whose address space is capped at 1 GiB: reading it whole would not fit
    with Python's JSON decode on top."""
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write('{"prompt": "')
        chunk = "word " * (1 << 18)
        for _ in range(200 * (1 << 20) // len(chunk)):
            f.write(chunk)
        f.write('"}\n')
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from specc.prompts.datasets import check_file\n"
            f"print(check_file('jsonl', {str(path)!r}, output_len=16, context_length=2048)[0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"a line over {MAX_PROMPT_BYTES >> 20} MiB" in out.stdout


def test_sharegpt_problems(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"not": "a list"}))
    assert "must hold a JSON list" in _check(str(p), "sharegpt")[0]
    p.write_text(json.dumps([{"conversations": [{"from": "human", "value": "one two three four"
                                                 * 1000}, {"from": "gpt", "value": "a b c d"}]}]))
    assert "is over the context length 2048" in _check(str(p), "sharegpt", output_len=0)[0]
    p.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]))
    assert "no usable conversations" in _check(str(p), "sharegpt")[0]


def test_a_fifo_dataset_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert "a FIFO, not a regular file" in _check(str(tmp_path / "fifo.jsonl"))[0]


def test_the_estimate_says_so_without_a_tokenizer():
    c = TokenCounter("/nonexistent/model")
    assert c.tokenizer is None and c("a b c") == 3 and "estimated" in c.how


def test_compile_refuses_the_file_before_anything_launches(tmp_path):
    path = _jsonl(tmp_path, {"prompt": "hi", "max_tokens": 10**9})
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "specc", "engine=sim",
                           "model_pair.context_length=2048", "benchmark.dataset=jsonl",
                           f"benchmark.dataset_path={path}", "execute=true",
                           f"hydra.run.dir={run}"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and "BENCH_DATASET_FORMAT at benchmark.dataset_path" in errors[0]
    assert not (run / "plan.json").exists() and not (run / "servers").exists()
