"""docs/your-models.md, run as written: its files written into an empty folder, its commands
run there, and what it says comes out (a user's own model pair and experiment through
`--config-dir`, next to the shipped groups)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from executor_helpers import free_port_block

DOC = Path(__file__).resolve().parent.parent / "docs" / "your-models.md"
REPO = DOC.parent.parent


def _files(text: str) -> dict[str, str]:
    """Each block the doc introduces with its file name: `path`: then a fenced block."""
    return dict(re.findall(r"^`([^`\s]+)`:\n\n```\w*\n(.*?)^```", text, flags=re.M | re.S))


def _commands(text: str) -> list[list[str]]:
    """The `specc` lines of the doc's bash blocks, as argv (comments dropped)."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        out += [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    return out


def _errors(text: str) -> list[tuple[list[str], str]]:
    """The doc's failing examples: `$ specc ...` and the one line it prints."""
    return [(shlex.split(cmd), line) for cmd, line in
            re.findall(r"^\$ (specc .*)\n(error .*)$", text, flags=re.M)]


def _specc(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    assert argv[0] == "specc", argv
    return subprocess.run([sys.executable, "-m", "specc", *argv[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=420,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_walk_through_runs_as_documented(tmp_path):
    text = DOC.read_text()
    files = _files(text)
    assert {"myconf/model_pair/my_llama.yaml", "myconf/model_pair/my_hub_llama.yaml",
            "myconf/experiment/my_sweep.yaml",
            "models/llama-3.1-8b-instruct/config.json"} <= set(files)
    for name, body in files.items():
        if name.endswith(".json"):
            json.loads(body)   # the doc shows valid files
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)

    compile_local, compile_hub, run_sim = _commands(text)
    out = tmp_path / "outputs" / "my_sweep"

    res = _specc(compile_local, tmp_path)
    assert res.returncode == 0, res.stderr
    (local,) = out.iterdir()
    review = (local / "review.md").read_text()
    facts = review[review.index("## Model facts"):]
    target = tmp_path / "models" / "llama-3.1-8b-instruct"
    assert f"config.json at {target}" in facts
    assert f"model.safetensors.index.json at {target}" in facts
    assert "config group" not in facts and "hub id" not in facts
    plan = json.loads((local / "plan.json").read_text())
    assert len(plan["servers"]) == 3 and len(plan["benchmarks"]) == 6
    assert {s["params"]["target"] for s in plan["servers"]} == {str(target)}

    res = _specc(compile_hub, tmp_path)
    assert res.returncode == 0, res.stderr
    (hub,) = set(out.iterdir()) - {local}
    facts = (hub / "review.md").read_text().split("## Model facts")[1]
    assert "`my-org/llama-3.1-8b-support-ft` (hub id: not checked" in facts
    assert "config group" in facts and "config.json at" not in facts

    # the doc's command on ports of its own: 31000 may be another suite's (or a user's run)
    res = _specc([*run_sim, f"engine.base_port={free_port_block(3)}"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (ran,) = set(out.iterdir()) - {local, hub}
    rows = [json.loads(line) for line in (ran / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows), rows
    assert (ran / "report.md").exists()

    # the failing examples: one line each, as the doc prints it, exit 2, nothing written
    examples = _errors(text)
    assert len(examples) == 2
    for argv, line in examples:
        res = _specc(argv, tmp_path)
        assert res.returncode == 2
        assert [ln for ln in res.stderr.splitlines() if ln.startswith("error ")] == [line]
    assert set(out.iterdir()) == {local, hub, ran}
