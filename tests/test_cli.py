"""The real CLI (`python -m specc`) as a subprocess: exit codes, one line per problem, run dirs.

All cases run once, concurrently, in a module fixture (each is a ~1 s Python start).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import run_specc

SECRETS = {"HF_TOKEN": "hf_SeCrEt_t0ken_value", "API_KEY": "sk-apikey-7777",
           "MY_SECRET": "my-secret-9", "DB_PASSWORD": "hunter2-db-pw"}

# name -> (args, expected exit code, text each error line must hold)
BAD = {
    "unknown_option": (["model_pair=nope"], ["model_pair", "nope", "llama3_8b_eagle3"]),
    "unknown_experiment": (["+experiment=nope"], ["experiment", "eagle3_sweep"]),
    "unknown_group": (["nogroup=x"], ["nogroup"]),
    "unknown_key": (["foo=1"], ["foo", "+foo"]),
    "unknown_added_key": (["+speculation.bogus=1"], ["speculation.bogus", "num_steps"]),
    "wrong_type": (["hardware.tp=abc"], ["hardware.tp", "integer"]),
    "out_of_range_tp": (["hardware.tp=0"], ["hardware.tp", "minimum"]),
    "out_of_range_port": (["engine.base_port=80"], ["engine.base_port", "1024"]),
    "bad_enum": (["benchmark.api=grpc"], ["benchmark.api", "chat"]),
    "missing_facts": (["model_pair.target.path=/nonexistent/model", "~model_pair.target.facts",
                       "model_pair.context_length=2048"],
                      ["model_pair.target.facts.", "/nonexistent/model/config.json"]),
    "matrix_cap": (["+experiment=eagle3_sweep", "max_points=5"], ["sweep", "max_points="]),
    "bad_override_syntax": (["hardware.tp=[1,"], ["CONFIG_OVERRIDE_SYNTAX", "hardware.tp"]),
    "secret_override_syntax": ([f"+engine.env.HF_TOKEN={SECRETS['HF_TOKEN']}[,"],
                               ["engine.env.HF_TOKEN"]),
    "context_mismatch": (["+experiment=eagle3_context_mismatch"],
                         ["262144", "131072", "model_pair.context_length=131072",
                          "draft_context_override", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]),
}


def _secret_args():
    return [f"+engine.env.{k}={v}" for k, v in SECRETS.items()] + ["+engine.env.PLAIN_VAR=visible"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    jobs = {name: (args, True) for name, (args, _) in BAD.items()}
    jobs["sweep_ok"] = (["+experiment=eagle3_sweep"], True)
    jobs["mixed_tp"] = (["sweep={hardware.tp:[1,8]}", "model_pair.context_length=2048"], True)
    jobs["secrets"] = (["+experiment=llama3_eagle3_pack", "engine=sim", *_secret_args()], True)
    jobs["secrets_invalid"] = (["+experiment=eagle3_context_mismatch", *_secret_args()], True)
    dirs = {name: tmp_path_factory.mktemp(name) for name in [*jobs, "multirun"]}
    jobs["multirun"] = (["-m", "+experiment=llama3_eagle3_pack", "engine=sglang,sim",
                         f"+engine.env.HF_TOKEN={SECRETS['HF_TOKEN']}",
                         f"hydra.sweep.dir={dirs['multirun'] / 'sweep'}"], False)

    def one(name):
        args, with_run_dir = jobs[name]
        return name, run_specc(args, dirs[name], run_dir=with_run_dir)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(pool.map(one, jobs))
    return {name: (*results[name], dirs[name] / "run") for name in jobs} | {
        "multirun": (*results["multirun"], dirs["multirun"] / "sweep")}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_with_one_line_per_problem(runs, name):
    code, out, err, run_dir = runs[name]
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert not (run_dir / "plan.json").exists()
    assert not (run_dir / "plan.sh").exists()
    problems = [line for line in err.splitlines() if line.startswith("error ")]
    assert problems, err
    for line in problems:
        assert " at " in line, line
        path = line.split(" at ", 1)[1].split(":", 1)[0]
        assert path and path != "<root>", line
    joined = "\n".join(problems)
    for needle in BAD[name][1]:
        assert needle in joined, (needle, joined)
    # nothing but the problem lines and the summary line
    others = [x for x in err.splitlines() if x.strip() and not x.startswith(("error ", "invalid: "))]
    assert others == [], others


def test_a_secret_in_a_bad_override_is_not_echoed(runs):
    code, out, err, _ = runs["secret_override_syntax"]
    assert SECRETS["HF_TOKEN"] not in out + err


def test_context_mismatch_writes_review_but_no_plan(runs):
    code, out, err, run_dir = runs["context_mismatch"]
    assert (run_dir / "review.md").exists()
    text = (run_dir / "review.md").read_text()
    assert "INVALID" in text and "CONTEXT_DRAFT_SHORTER" in text
    assert not (run_dir / "plan.json").exists()


def test_valid_sweep_writes_the_run_dir(runs):
    code, out, err, run_dir = runs["sweep_ok"]
    assert code == 0, err
    assert "Traceback" not in err
    for f in ("plan.json", "plan.sh", "review.md"):
        assert (run_dir / f).exists()
    assert "plan.json" in out and "# specc review" in out
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["version"] == 1 and plan["experiment"] == "eagle3_sweep"


def test_servers_of_different_tp_get_disjoint_gpus_on_the_node(runs):
    """Issue 7, bug 1: tp 8 servers were put on GPUs 8-15 and 24-31 of an 8-GPU node."""
    code, out, err, run_dir = runs["mixed_tp"]
    assert code == 0, err
    plan = json.loads((run_dir / "plan.json").read_text())
    assert sorted((s["params"]["tp"], s["wave"], tuple(s["gpus"]), s["port"])
                  for s in plan["servers"]) == [
        (1, 0, (0,), 30000), (1, 0, (1,), 30001),
        (8, 1, tuple(range(8)), 30000), (8, 2, tuple(range(8)), 30000)]


@pytest.mark.parametrize("name", ["secrets", "secrets_invalid"])
def test_secret_values_never_reach_disk_or_output(runs, name):
    code, out, err, run_dir = runs[name]
    assert code == (0 if name == "secrets" else 2), err
    everything = [out, err]
    for f in run_dir.rglob("*"):
        if f.is_file():
            everything.append(f.read_text(errors="replace"))
    assert len(everything) > 3
    for value in SECRETS.values():
        leaks = [i for i, text in enumerate(everything) if value in text]
        assert not leaks, (value, leaks)
    if name == "secrets":
        plan = json.loads((run_dir / "plan.json").read_text())
        sh = (run_dir / "plan.sh").read_text()
        for s in plan["servers"]:
            assert sorted(s["secrets"]) == sorted(SECRETS)
            assert s["env"]["PLAIN_VAR"] == "visible"
            for k in SECRETS:
                assert s["env"][k] == "${" + k + "}"
                assert f'{k}="${{{k}:?' in sh


def test_multirun_writes_one_run_dir_per_job_and_a_combined_review(runs):
    code, out, err, sweep_dir = runs["multirun"]
    assert code == 0, err
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "review.md").exists())
    assert [p.name for p in jobs] == ["0", "1"]
    engines = set()
    for p in jobs:
        plan = json.loads((p / "plan.json").read_text())
        engines.add(plan["engine"])
        assert (p / "plan.sh").exists()
    assert engines == {"sglang", "sim"}
    for f in sweep_dir.rglob("*"):
        if f.is_file():
            assert SECRETS["HF_TOKEN"] not in f.read_text(errors="replace"), f
    assert SECRETS["HF_TOKEN"] not in out + err
    combined = (sweep_dir / "review.md").read_text()
    assert "2 job(s)" in combined and "INVALID" not in combined
    assert "(engine: sglang)" in combined and "(engine: sim)" in combined
