"""CLI edges (issue 22 item 8) and a reviewed plan is the plan that runs (item 7, first
bullet): one line and a documented exit code each, never a usage screen or a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO
from executor_helpers import SMALL


def specc(*args, cwd=REPO, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "specc", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("args,says", [
    (["run"], "TASK_USAGE at run: run did not receive required positional arguments: plan"),
    (["run", "--plan", "x", "--bogus"], "TASK_USAGE at run: No idea what --bogus is!"),
    (["logs", "--run", ".", "--lines", "abc"], "TASK_USAGE at logs: abc is not a whole number"),
    (["logs", "--run", ".", "--lines", "-5"], "TASK_USAGE at --lines: -5 is negative"),
    (["plan", "--overrides", "a='b"], "TASK_USAGE at --overrides: No closing quotation"),
    (["--badflag"], "CONFIG_USAGE at <command line>: unrecognized arguments: --badflag"),
    (["--cfg", "nope"], "CONFIG_USAGE at <command line>: argument --cfg/-c: invalid choice"),
])
def test_a_usage_error_is_one_line_and_exit_2(args, says, tmp_path):
    code, out, err = specc(*args, cwd=tmp_path)
    assert code == 2, (code, out, err)
    assert err.strip().splitlines() == [err.strip()] and says in err, err
    assert "usage:" not in err and "Traceback" not in err


def test_info_alone_prints_hydras_info(tmp_path):
    code, out, err = specc("--info", cwd=tmp_path)
    assert code == 0 and "Hydra" in out and "Installed Hydra Plugins" in out, err


@pytest.fixture
def compiled(tmp_path, guard):
    run = tmp_path / "run"
    code, out, err = specc(*SMALL, "baseline=false",
                           f"engine.base_port={guard.port(1)}", f"hydra.run.dir={run}")
    assert code == 0, err
    return run


def test_review_and_plan_carry_the_same_digest(compiled):
    digest = json.loads((compiled / "plan.json").read_text())["digest"]
    assert digest.startswith("sha256:") and f"`{digest}`" in (compiled / "review.md").read_text()


def test_a_plan_edited_after_review_is_refused_unless_accepted(compiled):
    plan = compiled / "plan.json"
    data = json.loads(plan.read_text())
    data["servers"][0]["env"]["SPECC_SIM_FAULT"] = "crash@load_weights"
    plan.write_text(json.dumps(data))
    code, out, err = specc("run", "--plan", plan)
    assert code == 2, err
    first, *diff = err.strip().splitlines()   # one line, then what differs from the review
    assert first.startswith(f"error PLAN_EDITED at {plan}: plan.json was edited after it was "
                            f"compiled (review.md names {data['digest']})")
    assert diff[0].startswith("  differs from the plan compiled ") and len(diff) == 2
    assert diff[1].endswith(': env.SPECC_SIM_FAULT: (none) -> "crash@load_weights"')
    assert not (compiled / "state.json").exists() and not (compiled / "results.jsonl").exists()
    code, out, err = specc("run", "--plan", plan, "--accept-edited", timeout=300)
    assert "warning PLAN_EDITED" in err and "running it as edited" in err
    assert (compiled / "results.jsonl").exists()   # it ran (the edit crashes its server)
    assert code == 3, err


def test_a_whitespace_edit_is_an_edit_too(compiled):
    plan = compiled / "plan.json"
    plan.write_text(plan.read_text() + "\n")
    code, out, err = specc("run", "--plan", plan)
    assert code == 2 and "PLAN_EDITED" in err
