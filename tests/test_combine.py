"""The multirun combined review: each job's review nested under its job heading."""

from __future__ import annotations

from specc.compile.emit import review
from specc.report.combine import combine

JOB_REVIEW = """# specc review: job

## Diagnostics

- none

### detail

```bash
# kimi-k2.5-baseline-tp8-3da5fb
python -m sglang.launch_server
```

## Servers
"""


def _headings(text):
    fenced, out = False, []
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line)
    return out


def test_headings_nest_one_level_below_the_job_heading(tmp_path):
    jobs = []
    for name in ("0", "1"):
        d = tmp_path / name
        d.mkdir()
        (d / "review.md").write_text(JOB_REVIEW.replace("job", f"job {name}"))
        jobs.append(d)
    assert combine(tmp_path / "sweep", jobs) == 0
    text = (tmp_path / "sweep" / "review.md").read_text()
    assert _headings(text) == ["# specc multirun: 2 job(s)"] + [
        h for name in ("0", "1") for h in (
            f"## job {name}", f"### specc review: job {name}", "#### Diagnostics", "##### detail",
            "#### Servers")]
    # a comment in a code block is not a heading
    assert text.count("\n# kimi-k2.5-baseline-tp8-3da5fb\n") == 2


def test_nesting_keeps_every_level_of_a_real_review(compose):
    from specc.compile.pipeline import compile_config
    from specc.report.combine import nest_headings

    result = compile_config(compose(["+experiment=llama3_eagle3_pack"]))
    text = review(result.plan, result.diagnostics, title="t")
    before = [len(h) - len(h.lstrip("#")) for h in _headings(text)]
    after = [len(h) - len(h.lstrip("#")) for h in _headings(nest_headings(text))]
    assert set(before) == {1, 2} and after == [n + 2 for n in before]
