"""The real CLI (`python -m specc`) as a subprocess: exit codes, one line per problem, run dirs.

All cases run once, concurrently, in a module fixture (each is a ~1 s Python start).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run_specc
from specc.plan import PLAN_VERSION

SECRETS = {"HF_TOKEN": "hf_SeCrEt_t0ken_value", "API_KEY": "sk-apikey-7777",
           "MY_SECRET": "my-secret-9", "DB_PASSWORD": "hunter2-db-pw"}
# secret by what they are: after a secret flag, or shaped like a token under a plain name
ARG_SECRETS = {"ADMIN_API_KEY": "admin-arg-secret-31", "SSL_KEYFILE_PASSWORD": "pw-arg-secret-32"}
SHAPED = {"HUB_LOGIN": "hf_" + "Zq9" * 12, "OTHER_VAR": "q7Rk2LmN9xVb4TzW8cYp3HdF6sJa1GeU5"}
# under a secret name, in a list and a mapping (invalid: env values are scalars)
NESTED = ["list-secret-41", "list-secret-42", "map-secret-43"]
BAD_OVERRIDE_SECRET = "arg-in-bad-override-51"
ALL_SECRETS = [*SECRETS.values(), *ARG_SECRETS.values(), *SHAPED.values(), *NESTED,
               BAD_OVERRIDE_SECRET]
CTX = "model_pair.context_length=2048"

# name -> (args, expected exit code, text each error line must hold)
BAD = {
    "unknown_option": (["model_pair=nope"], ["model_pair", "nope", "llama3_8b_eagle3"]),
    "unknown_experiment": (["+experiment=nope"], ["experiment", "eagle3_sweep"]),
    "unknown_group": (["nogroup=x"], ["nogroup"]),
    "unknown_key": (["foo=1"], ["foo", "--cfg job"]),
    "mistyped_key": (["benchmark.concurency=4"], ["did you mean benchmark.concurrency?"]),
    "mistyped_option": (["engine=sglnag"], ["did you mean sglang?"]),
    "model_path": (["model_pair.target.path=/nonexistent"],
                   ["MODEL_PATH at model_pair.target.path", "/nonexistent does not exist"]),
    "unknown_added_key": (["+speculation.bogus=1"], ["speculation.bogus", "num_steps"]),
    "wrong_type": (["hardware.tp=abc"], ["hardware.tp", "integer"]),
    "out_of_range_tp": (["hardware.tp=0"], ["hardware.tp", "minimum"]),
    "out_of_range_port": (["engine.base_port=80"], ["engine.base_port", "1024"]),
    "bad_enum": (["benchmark.api=grpc"], ["benchmark.api", "chat"]),
    "missing_facts": (["model_pair.target.path=org/unknown-model", "~model_pair.target.facts",
                       "model_pair.context_length=2048"],
                      ["model_pair.target.facts.", "org/unknown-model is a hub id"]),
    "matrix_cap": (["+experiment=eagle3_sweep", "max_points=5"], ["sweep", "max_points="]),
    "bad_override_syntax": (["hardware.tp=[1,"], ["CONFIG_OVERRIDE_SYNTAX", "hardware.tp"]),
    "secret_override_syntax": ([f"+engine.env.HF_TOKEN={SECRETS['HF_TOKEN']}[,"],
                               ["engine.env.HF_TOKEN"]),
    "secret_arg_override_syntax": ([f"engine.extra_args=[--api-key,{BAD_OVERRIDE_SECRET}"],
                                   ["CONFIG_OVERRIDE_SYNTAX", "engine.extra_args"]),
    # an engine key the chosen engine does not have names the engine that has it
    "engine_key": (["engine=vllm", "+engine.attention_backend=fa3", CTX],
                   ["SCHEMA_ENGINE_KEY", "engine.attention_backend", "sglang / sim key"]),
    # an engine's own spelling of a knob every engine has names the server knob
    "engine_knob": (["+engine.max_num_seqs=8", CTX],
                    ["SCHEMA_ENGINE_KEY", "engine.max_num_seqs", "server.max_running_requests=8"]),
    "engine_knob_unplussed": (["engine=vllm", "engine.gpu_memory_utilization=0.8", CTX],
                              ["SCHEMA_ENGINE_KEY", "engine.gpu_memory_utilization",
                               "server.mem_fraction=0.8"]),
    "engine_key_swept": (["engine=vllm", "sweep={engine.max_running_requests:[8,16]}", CTX],
                         ["SCHEMA_ENGINE_KEY", "sweep.engine.max_running_requests",
                          "sweep server.max_running_requests instead"]),
    # input gaps that used to compile and fail (or drop values) at run time
    "num_prompts_huge": (["benchmark.num_prompts=1000000000", CTX],
                         ["BENCH_TOO_LARGE", "benchmark.num_prompts"]),
    "name_too_long": ([f"model_pair.name={'n' * 300}", CTX], ["NAME_TOO_LONG", "model_pair.name"]),
    "model_path_flag": (["model_pair.target.path=--help", CTX],
                        ["SCHEMA_PATTERN", "model_pair.target.path", "flag"]),
    "bad_host": (["hardware.host='bad host'", CTX], ["SCHEMA_FORMAT", "hardware.host"]),
    "overlapping_axes": (["sweep={benchmark:[{concurrency:1},{concurrency:2}],"
                          "benchmark.concurrency:[4,8]}", CTX],
                         ["SWEEP_AXIS", "sweep.benchmark.concurrency", "overlaps"]),
    "duplicated_axis": (["sweep={benchmark.concurrency:[1,2],benchmark.concurrency:[4]}", CTX],
                        ["SWEEP_AXIS", "sweep.benchmark.concurrency", "twice"]),
    "buried_error": (["+experiment=eagle3_sweep", "hardware.tp=3"], ["TOPOLOGY_HEADS"]),
    "context_mismatch": (["+experiment=eagle3_context_mismatch"],
                         ["262144", "131072", "model_pair.context_length=131072",
                          "draft_context_override", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]),
}


def _secret_args():
    return ([f"+engine.env.{k}={v}" for k, v in {**SECRETS, **SHAPED}.items()]
            + ["+engine.env.PLAIN_VAR=visible",
               "engine.extra_args=[--admin-api-key,{},'--ssl-keyfile-password={}']".format(
                   *ARG_SECRETS.values())])


def _nested_secret_args():
    return [f"+engine.env.LIST_TOKEN=[{NESTED[0]},{NESTED[1]}]",
            f"+engine.env.MAP_PASSWORD={{a:{NESTED[2]}}}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    jobs = {name: (args, True) for name, (args, _) in BAD.items()}
    jobs["sweep_ok"] = (["+experiment=eagle3_sweep"], True)
    jobs["mixed_tp"] = (["sweep={hardware.tp:[1,8]}", "model_pair.context_length=2048"], True)
    jobs["secrets"] = (["+experiment=llama3_eagle3_pack", "engine=sim", *_secret_args()], True)
    jobs["secrets_invalid"] = (["+experiment=eagle3_context_mismatch", *_secret_args(),
                                *_nested_secret_args()], True)
    # Hydra flags after the overrides (specc's own overrides used to split them)
    jobs["cfg_after_overrides"] = ([CTX, f"+engine.env.HF_TOKEN={SECRETS['HF_TOKEN']}",
                                    "--cfg", "job"], True)
    extra = ["multirun", "multirun_flag_last", "long_experiment", "home_dataset"]
    dirs = {name: tmp_path_factory.mktemp(name) for name in [*jobs, *extra]}
    jobs["multirun"] = (["-m", "+experiment=llama3_eagle3_pack", "engine=sglang,sim",
                         f"+engine.env.HF_TOKEN={SECRETS['HF_TOKEN']}",
                         f"hydra.sweep.dir={dirs['multirun'] / 'sweep'}"], False)
    jobs["multirun_flag_last"] = (["+experiment=llama3_eagle3_pack", "engine=sglang,sim",
                                   f"hydra.sweep.dir={dirs['multirun_flag_last'] / 'sweep'}",
                                   "--multirun"], False)
    # an experiment named longer than a directory name may be, in Hydra's default run dir
    conf = dirs["long_experiment"] / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "long.yaml").write_text(f"# @package _global_\nexperiment: {'e' * 300}\n")
    jobs["long_experiment"] = (["+experiment=long", "--config-dir", str(conf.parent)], False)
    # a dataset under ~: compile checks it, plan.json must hold the path the loader reads
    home = dirs["home_dataset"] / "home"
    home.mkdir()
    (home / "prompts.jsonl").write_text('{"prompt": "hello there"}\n')
    jobs["home_dataset"] = ([CTX, "benchmark.dataset=jsonl", "benchmark.dataset_path='~/prompts.jsonl'"],
                            True)
    env = {"home_dataset": {"HOME": str(home)}}
    cwd = {"long_experiment": dirs["long_experiment"]}

    def one(name):
        args, with_run_dir = jobs[name]
        return name, run_specc(args, dirs[name], run_dir=with_run_dir, env=env.get(name),
                               cwd=cwd.get(name))

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(pool.map(one, jobs))
    return {name: (*results[name], dirs[name] / "run") for name in jobs} | {
        name: (*results[name], dirs[name] / "sweep") for name in ("multirun", "multirun_flag_last")}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_with_one_line_per_problem(runs, name):
    code, out, err, run_dir = runs[name]
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert not run_dir.exists(), sorted(run_dir.rglob("*"))   # an invalid compile writes nothing
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


@pytest.mark.parametrize("name, value", [("secret_override_syntax", SECRETS["HF_TOKEN"]),
                                         ("secret_arg_override_syntax", BAD_OVERRIDE_SECRET)])
def test_a_secret_in_a_bad_override_is_not_echoed(runs, name, value):
    code, out, err, run_dir = runs[name]
    assert code == 2 and "CONFIG_OVERRIDE_SYNTAX" in err
    assert value not in out + err
    assert not run_dir.exists() or not any(
        value in f.read_text(errors="replace") for f in run_dir.rglob("*") if f.is_file())


def test_real_errors_are_not_buried_under_points_that_would_be_dropped(runs):
    code, out, err, _ = runs["buried_error"]
    codes = {line.split()[1] for line in err.splitlines() if line.startswith("error ")}
    assert "TOPOLOGY_HEADS" in codes
    assert not codes & {"SPEC_TOPK1_DRAFT_TOKENS", "SPEC_DRAFT_TOKENS_LIMIT"}, err


def test_hydra_flags_after_overrides_work(runs):
    code, out, err, _ = runs["cfg_after_overrides"]
    assert code == 0, err
    assert "experiment: adhoc" in out and "usage" not in (out + err).lower()
    assert SECRETS["HF_TOKEN"] not in out + err      # --cfg prints the config: redacted
    code, out, err, sweep_dir = runs["multirun_flag_last"]
    assert code == 0, err
    assert sorted(p.name for p in sweep_dir.iterdir() if (p / "plan.json").exists()) == ["0", "1"]


def test_an_experiment_name_too_long_for_a_directory_is_one_line(runs):
    code, out, err, _ = runs["long_experiment"]
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error NAME_TOO_LONG at hydra.run.dir: ")
    assert "Traceback" not in out + err


def test_a_home_relative_dataset_is_read_by_the_loader_as_checked(runs):
    """`~` is resolved once, at compile time, into the plan: the loader reads that file."""
    from specc.plan import Plan
    from specc.prompts.datasets import load_prompts

    code, out, err, run_dir = runs["home_dataset"]
    assert code == 0, err
    plan = Plan.load(run_dir / "plan.json")
    p = plan.benchmarks[0].params
    assert p.dataset_path == str(run_dir.parent / "home" / "prompts.jsonl")
    prompts = load_prompts(p.dataset, num=2, input_len=p.input_len,
                           output_len=p.output_len, path=p.dataset_path)
    assert [x.text for x in prompts] == ["hello there", "hello there"]


def test_context_mismatch_writes_nothing(runs):
    """An invalid compile leaves no run dir behind: its errors are on stderr, one line each."""
    code, out, err, run_dir = runs["context_mismatch"]
    assert code == 2
    assert "error CONTEXT_DRAFT_SHORTER at" in err and "nothing written" in err
    assert not run_dir.exists()


def test_valid_sweep_writes_the_run_dir(runs):
    code, out, err, run_dir = runs["sweep_ok"]
    assert code == 0, err
    assert "Traceback" not in err
    for f in ("plan.json", "plan.sh", "review.md"):
        assert (run_dir / f).exists()
    assert "plan.json" in out and "# specc review" in out
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["version"] == PLAN_VERSION and plan["experiment"] == "eagle3_sweep"


def test_servers_of_different_tp_get_disjoint_gpus_on_the_node(runs):
    """Issue 7, bug 1: tp 8 servers were put on GPUs 8-15 and 24-31 of an 8-GPU node."""
    code, out, err, run_dir = runs["mixed_tp"]
    assert code == 0, err
    plan = json.loads((run_dir / "plan.json").read_text())
    assert sorted((s["params"]["tp"], s["wave"], tuple(s["gpus"]), s["port"])
                  for s in plan["servers"]) == [
        (1, 0, (0,), 31000), (1, 0, (1,), 31001),
        (8, 1, tuple(range(8)), 31000), (8, 2, tuple(range(8)), 31000)]


@pytest.mark.parametrize("name", ["secrets", "secrets_invalid"])
def test_secret_values_never_reach_disk_or_output(runs, name):
    code, out, err, run_dir = runs[name]
    assert code == (0 if name == "secrets" else 2), err
    everything = [out, err]
    for f in run_dir.rglob("*"):
        if f.is_file():
            everything.append(f.read_text(errors="replace"))
    if name == "secrets":
        assert len(everything) > 3
        assert any(f.parent.name == ".hydra" for f in run_dir.rglob("*.yaml"))
    else:   # invalid: Hydra's saved configs went with the run dir
        assert not run_dir.exists()
    for value in ALL_SECRETS:
        leaks = [i for i, text in enumerate(everything) if value in text]
        assert not leaks, (value, leaks)
    if name == "secrets":
        plan = json.loads((run_dir / "plan.json").read_text())
        sh = (run_dir / "plan.sh").read_text()
        for s in plan["servers"]:
            assert sorted(s["secrets"]) == sorted({**SECRETS, **SHAPED, **ARG_SECRETS})
            assert s["env"]["PLAIN_VAR"] == "visible"
            for k in {**SECRETS, **SHAPED}:
                assert s["env"][k] == "${" + k + "}"
                assert f'{k}="${{{k}:?' in sh
            assert "${ADMIN_API_KEY}" in s["argv"]
            assert "--ssl-keyfile-password=${SSL_KEYFILE_PASSWORD}" in s["argv"]


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
    # each job named by the override that sets it apart, not only by its number
    assert "## job 0: engine=sglang" in combined and "## job 1: engine=sim" in combined
    assert "- [1](1/review.md) (`engine=sim`): valid" in combined
