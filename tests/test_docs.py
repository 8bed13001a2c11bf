"""The project's documentation stays true and the project stands alone (issue 19, items 6-7).

- No tracked file points outside the project (a user's clone has none of the workspace
  it was written in).
- README.md stays short, and every link in it and in docs/ reaches a file (and heading).
- Every field of plan.json's records, of a result row and of a request line is named in
  the doc of that file, so a field added in code without its documentation fails here.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from specc import plan as plan_mod

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README_MAX_LINES = 400
#: Paths of the workspace the project was written in; built here so that this file, the
#: only one allowed to name them, does not match itself either.
OUTSIDE = ("../" + "shared", "/work/" + "shared", "shared/" + "reference", "shared/" + "tools")


def _tracked() -> list[Path]:
    """git's tracked files; outside a checkout (an unpacked sdist) every file of the tree
    but build and venv folders."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        skip = {".venv", "build", "dist", "__pycache__", ".git"}
        return [p for p in REPO.rglob("*") if p.is_file()
                and not skip.intersection(p.relative_to(REPO).parts)]
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [REPO / p for p in out.stdout.decode().split("\0") if p]


def test_no_tracked_file_points_outside_the_project():
    here = Path(__file__).resolve()
    hits = []
    for path in _tracked():
        if path.resolve() == here or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(), 1):
            if any(o in line for o in OUTSIDE):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not hits, "cite the project's own file or the public upstream source:\n" + \
        "\n".join(hits)


def test_readme_is_short_and_links_every_doc():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most 400)"
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", "\n".join(lines)))
    on_disk = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert on_disk, "no docs/*.md"
    assert on_disk <= linked, f"docs not linked from README.md: {sorted(on_disk - linked)}"


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces '-'."""
    out, fence = set(), False
    for line in md.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("md", [REPO / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: p.name)
def test_every_relative_link_resolves(md):
    broken = []
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (md.parent / file).resolve() if file else md
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading '#{anchor}' in {dest.name}")
    assert not broken, f"{md.name}: " + "; ".join(broken)


def _records(cls, seen=None) -> set:
    """`cls` and every plan record its fields hold, however nested (tuple, | None)."""
    seen = set() if seen is None else seen
    if cls in seen:
        return seen
    seen.add(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        for t in re.findall(r"[A-Z]\w+", str(hints[f.name])):
            sub = getattr(plan_mod, t, None)
            if isinstance(sub, type) and issubclass(sub, plan_mod.Record):
                _records(sub, seen)
    return seen


def test_every_plan_field_is_documented():
    doc = (DOCS / "plan-json.md").read_text()
    records = _records(plan_mod.Plan)
    assert {"Server", "Benchmark", "Readiness", "Cluster", "SlurmJob", "EngineInfo"} <= {
        c.__name__ for c in records}
    missing = [f"{c.__name__}.{f.name}" for c in sorted(records, key=lambda c: c.__name__)
               for f in dataclasses.fields(c) if f"`{f.name}`" not in doc]
    assert not missing, f"plan.json fields not named in docs/plan-json.md: {missing}"
    assert "`engine_info`" in doc and all(
        f"`{k}`" in doc for k in _engine_info_keys()), "engine_info keys"


def _engine_info_keys() -> list[str]:
    from specc.engines import get_engine
    return [f.name for f in dataclasses.fields(get_engine("sglang").info())]


def test_every_result_and_request_field_is_documented():
    from specc.results import ResultRow
    from specc.run import point
    from specc import requestlog as reqlog
    from specc.run.loadgen.records import RequestRecord

    doc = (DOCS / "run-dir.md").read_text()
    # request lines and the row's figures as the real code writes them
    records = [RequestRecord(ok=True, output_tokens=8, input_tokens=4, ttft=0.05 + i / 100,
                             e2e_latency=0.4 + i / 50, start=100.0 + i, index=i)
               for i in range(6)]
    prompts = [SimpleNamespace(id=f"p{i}", category=("math", "coding")[i % 2]) for i in range(6)]
    lines = reqlog.lines_for(records, prompts, repeat=0, attempt=100.0)
    repeats = [{"duration": 3.0, "output_tokens": 48, "requests": 6, "stopped": "fixed"}]
    figures = point.figures_extra(lines, 3.0, repeats, None)
    from conftest import bench_params

    bench = plan_mod.Benchmark(id="b", server="s", baseline=None,
                               params=plan_mod.BenchParams.read(bench_params(), "params"))
    row = point._row(bench, "ok", None, {}, started_at=99.0, cache_flush="flushed",
                     accept_per_position=[0.8], **figures)
    fields = {f.name for f in dataclasses.fields(ResultRow)} - {"extra"}
    missing = sorted(f"row {k}" for k in fields | set(row) if f"`{k}`" not in doc)
    missing += sorted(f"request {k}" for k in lines[0] if f"`{k}`" not in doc)
    assert not missing, f"fields not named in docs/run-dir.md: {missing}"
    for code in (0, 2, 3, 4, 130):
        assert re.search(rf"^\| {code} \|", doc, re.M), f"exit code {code} not in docs/run-dir.md"
