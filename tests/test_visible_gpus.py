"""The executor runs a plan's GPU slots on the GPUs it was given (CUDA_VISIBLE_DEVICES),
not on the first GPUs of the machine: on a shared node, or in a Slurm allocation under
hydra/launcher=submitit_slurm, GPU 0 of the plan is the first GPU granted. Without it a
server lands on a GPU someone else holds, the incident's way to a wrong number or an OOM.
"""

from __future__ import annotations

from dataclasses import replace

from executor_helpers import SMALL, SimGuard, compile_plan, run_cli, state
from specc.run.lifecycle import on_visible_gpus


def _two_servers(tmp_path):
    plan = compile_plan(tmp_path / "c", ["hardware.tp=1", "hardware.gpus_per_node=2",
                                         "+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2}]}"])
    assert [s.gpus for s in plan.servers] == [(0,), (1,)]
    return plan


def test_unset_leaves_the_plan_as_compiled(tmp_path):
    plan = _two_servers(tmp_path)
    assert on_visible_gpus(plan, {}) == (plan, [])
    assert on_visible_gpus(plan, {"CUDA_VISIBLE_DEVICES": ""}) == (plan, [])


def test_plan_gpus_index_the_visible_ones(tmp_path):
    plan = _two_servers(tmp_path)
    got, problems = on_visible_gpus(plan, {"CUDA_VISIBLE_DEVICES": "6,7"})
    assert problems == []
    assert [(s.gpus, s.env["CUDA_VISIBLE_DEVICES"]) for s in got.servers] == [((6,), "6"), ((7,), "7")]


def test_uuids_are_passed_on_as_given(tmp_path):
    plan = _two_servers(tmp_path)
    got, _ = on_visible_gpus(plan, {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"})
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in got.servers] == ["GPU-aa", "GPU-bb"]
    assert [s.gpus for s in got.servers] == [(0,), (1,)]   # no index to check holders by


def test_fewer_visible_gpus_than_planned_is_one_line_per_server(tmp_path):
    plan = _two_servers(tmp_path)
    wide = replace(plan, servers=(replace(plan.servers[0], gpus=(0, 1, 2)),) + plan.servers[1:])
    got, problems = on_visible_gpus(wide, {"CUDA_VISIBLE_DEVICES": "3,4"})
    assert got is wide
    assert len(problems) == 1 and problems[0].startswith("error GPUS_NOT_VISIBLE at servers.")
    assert "CUDA_VISIBLE_DEVICES=3,4" in problems[0] and "hardware.gpus_per_node=2" in problems[0]


def test_a_run_uses_the_granted_gpus_and_refuses_too_few(tmp_path):
    guard = SimGuard(tmp_path)
    base = guard.port(2)
    args = [*SMALL, "hardware.tp=1", "hardware.gpus_per_node=2", f"engine.base_port={base}",
            "+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2}]}", "execute=true"]
    try:
        ok = run_cli([*args, f"hydra.run.dir={tmp_path / 'ok'}"], env={"CUDA_VISIBLE_DEVICES": "5,7"})
        few = run_cli([*args, f"hydra.run.dir={tmp_path / 'few'}"], env={"CUDA_VISIBLE_DEVICES": "5"})
    finally:
        left = guard.check()
    assert left == []
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert sorted(s["gpus"] for s in state(tmp_path / "ok")["servers"].values()) == [[5], [7]]
    assert few.returncode == 2
    assert "error GPUS_NOT_VISIBLE at servers." in few.stderr and "Traceback" not in few.stderr
    assert not (tmp_path / "few" / "servers").exists() and not (tmp_path / "few" / "results.jsonl").exists()
