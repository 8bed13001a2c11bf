"""Drift check: specc's engine facts against the REAL released engines.

For each engine's pinned release (the adapters' ``pinned_version``):

1. every launch command specc compiles (every shipped experiment, for each
   engine, plus variants that switch on every optional flag) is accepted by
   that release's own argument parser (`python -m sglang.launch_server` /
   `vllm serve`), run in a venv holding the released wheel (tests/drift/venvs.py);
2. every log marker, metric name and endpoint the adapters rely on
   (``source_evidence()``: fact, file, text) is in that release's source.

A new pinned version fails here, naming each fact and file that changed, until
the adapter is updated. Skipped only when the package registry cannot be reached.
Deselect locally with ``-m "not drift"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from venvs import BuildFailed, RegistryUnreachable, ensure_venv, site_packages  # noqa: E402

sys.path.pop(0)

from specc.compile.pipeline import compile_config  # noqa: E402
from specc.engines import get_engine  # noqa: E402

pytestmark = [pytest.mark.drift, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
PARSERS = REPO / "specc" / "engines" / "parsers"
#: engine -> (package whose parser checks its commands, parse script)
CHECKED_BY = {"sglang": ("sglang", "sglang_parse.py"), "sim": ("sglang", "sglang_parse.py"),
              "vllm": ("vllm", "vllm_parse.py")}
#: Overrides that make the adapters emit every optional flag they have (values the
#: real parsers accept), on top of each experiment.
FLAG_VARIANTS = {
    "sglang": [["server.cuda_graph_max_bs=64", "server.mem_fraction=0.85",
                "engine.attention_backend=fa3", "server.dtype=bfloat16",
                "server.kv_cache_dtype=fp8_e4m3", "server.quantization=fp8",
                "server.max_running_requests=128", "hardware.tp=4", "hardware.dp=2",
                "hardware.ep=4", "model_pair.context_length=2048"],
               ["speculation=ngram", "model_pair.context_length=2048"],
               ["speculation=eagle", "model_pair.context_length=2048",
                "model_pair.draft.facts.architecture=LlamaForCausalLMEagle"],
               ["speculation.num_steps=null", "speculation.topk=null",
                "speculation.num_draft_tokens=null", "model_pair.context_length=2048"],
               # pipeline parallelism with EAGLE: what 0.5.23 serves (specc/engines/sglang.py)
               ["speculation=eagle", "hardware.tp=4", "hardware.pp=2",
                "model_pair.context_length=2048",
                "model_pair.draft.facts.architecture=LlamaForCausalLMEagle"]],
    "vllm": [["server.max_running_requests=128", "server.mem_fraction=0.85", "hardware.tp=4",
              "server.cuda_graph_max_bs=64", "server.dtype=bfloat16",
              "server.kv_cache_dtype=fp8_e4m3", "server.quantization=fp8",
              "hardware.dp=2", "model_pair.context_length=2048"],
             ["speculation=ngram", "model_pair.context_length=2048"],
             ["hardware.tp=4", "hardware.pp=2", "speculation=none", "sweep=null",
              "model_pair.context_length=2048"]],
}
FLAG_VARIANTS["sim"] = FLAG_VARIANTS["sglang"][:2]


def _compose(overrides):
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from conftest import compose_config
    finally:
        sys.path.pop(0)
    return compose_config(overrides)


def compiled_servers(engine: str) -> list[dict]:
    """{id, argv} of every server every shipped experiment (and flag variant) compiles to."""
    out, seen = [], set()
    runs = [([f"+experiment={e}"], False) for e in EXPERIMENTS]
    runs += [(["+experiment=eagle3_sweep", "model_pair=llama3_8b_eagle3", *v], True)
             for v in FLAG_VARIANTS[engine]]
    for overrides, must_compile in runs:
        cfg = _compose([*overrides, f"engine={engine}"])
        result = compile_config(cfg)
        if not result.ok:   # e.g. the incident's mismatch: refused, so nothing is launched
            assert not must_compile, [d.line() for d in result.diagnostics if d.severity == "error"]
            continue
        for s in result.plan.servers:
            key = tuple(s.argv)
            if key not in seen:
                seen.add(key)
                out.append({"id": f"{' '.join(overrides)} :: {s.id}", "argv": list(s.argv)})
    return out


_VENVS: dict[tuple[str, str], Path] = {}


def engine_python(package: str) -> Path:
    version = get_engine(package).pinned_version
    key = (package, version)
    if key not in _VENVS:
        try:
            _VENVS[key] = ensure_venv(package, version, log=print)
        except RegistryUnreachable as e:
            pytest.skip(f"package registry unreachable, cannot fetch {package}=={version}: {e}")
        except BuildFailed as e:
            pytest.fail(f"cannot build a venv with the pinned {package}=={version} "
                        f"(specc/engines/{package}.py pinned_version): {e}")
    return _VENVS[key]


def parse_with_real_parser(package: str, script: str, servers: list[dict]) -> dict:
    py = engine_python(package)
    proc = subprocess.run([str(py), str(PARSERS / script)], input=json.dumps({"servers": servers}),
                          capture_output=True, text=True, timeout=600)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail(f"{script} under {package} crashed (exit {proc.returncode}):\n"
                    f"{proc.stderr[-3000:]}")


@pytest.mark.parametrize("engine", ["sglang", "vllm", "sim"])
def test_every_emitted_launch_command_is_accepted_by_the_pinned_engines_parser(engine):
    package, script = CHECKED_BY[engine]
    servers = compiled_servers(engine)
    assert len(servers) >= 5, "too few commands compiled to be a check"
    report = parse_with_real_parser(package, script, servers)
    pinned = get_engine(package).pinned_version
    assert report["version"] == pinned
    lines = [f"{r['id']}: {r['error']}" for r in report["rejected"]]
    assert not lines, (
        f"{package} {pinned}'s own parser rejects {len(lines)} of {len(servers)} launch commands "
        f"that specc/engines/{engine}.py emits:\n  " + "\n  ".join(lines))


#: A vLLM server of 8 GPUs on nodes of 4: two ranks, the follower --headless.
VLLM_TWO_NODES = ["+experiment=eagle3_sweep", "engine=vllm",
                  "model_pair=llama3_8b_eagle3", "model_pair.context_length=2048",
                  "cluster=slurm", "hardware.gpus_per_node=4", "hardware.nodes=2",
                  "hardware.tp=8", "cluster.nodes_per_server=2"]


def test_a_two_node_vllm_servers_head_and_follower_commands_read_as_meant():
    """Each rank's command as specc.run.rank makes it on its node (placeholders filled in,
    the follower args added on rank 1), through 0.33's own `vllm serve` parser: the rank,
    the head's address and planned port, and --headless only on the follower."""
    from specc.run.rank import fill

    result = compile_config(_compose(VLLM_TWO_NODES))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    head = "10.0.0.5"
    servers = []
    for s in result.plan.servers:
        assert s.nodes == 2 and s.rendezvous_port
        for rank in ("0", "1"):
            servers.append({
                "id": f"{s.id} rank {rank}",
                "argv": fill(list(s.argv), rank=rank, head=head, follower=list(s.follower_args)),
                "expect": {"nnodes": 2, "node_rank": int(rank), "master_addr": head,
                           "master_port": s.rendezvous_port, "headless": rank != "0"}})
    report = parse_with_real_parser("vllm", "vllm_parse.py", servers)
    assert report["version"] == get_engine("vllm").pinned_version
    assert not report["rejected"], report["rejected"]
    assert report["servers"] == len(servers) >= 2


def test_the_checked_commands_exercise_every_optional_flag():
    """The variants above really switch the adapters' optional flags on."""
    flags = {engine: {a for s in compiled_servers(engine) for a in s["argv"] if a.startswith("--")}
             for engine in ("sglang", "vllm")}
    for flag in ("--cuda-graph-max-bs-decode", "--mem-fraction-static", "--attention-backend",
                 "--dtype", "--kv-cache-dtype", "--quantization", "--dp-size", "--ep-size", "--pp-size",
                 "--context-length", "--speculative-algorithm", "--speculative-draft-model-path",
                 "--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-num-draft-tokens", "--max-running-requests", "--enable-metrics",
                 "--trust-remote-code"):
        assert flag in flags["sglang"], flag
    for flag in ("--max-num-seqs", "--gpu-memory-utilization", "--max-cudagraph-capture-size",
                 "--dtype", "--kv-cache-dtype", "--quantization", "--data-parallel-size",
                 "--pipeline-parallel-size", "--max-model-len", "--speculative-config",
                 "--trust-remote-code"):
        assert flag in flags["vllm"], flag


@pytest.mark.parametrize("package", ["sglang", "vllm"])
def test_every_marker_metric_and_endpoint_is_in_the_pinned_engines_source(package):
    engine = get_engine(package)
    root = site_packages(engine_python(package))
    evidence = engine.source_evidence()
    assert evidence, f"specc/engines/{package}.py states no source evidence"
    problems = []
    texts: dict[str, str | None] = {}
    for fact, file, text in evidence:
        if file not in texts:
            path = root / file
            texts[file] = path.read_text(errors="replace") if path.is_file() else None
        src = texts[file]
        absent = text.startswith("!")
        needle = text[1:] if absent else text
        if src is None:
            problems.append(f"{fact}: file {file} is not in {package} {engine.pinned_version}")
        elif absent and needle in src:
            problems.append(f"{fact}: {needle!r} is back in {file}")
        elif not absent and needle not in src:
            problems.append(f"{fact}: {needle!r} not found in {file}")
    assert not problems, (
        f"{len(problems)} fact(s) in specc/engines/{package}.py no longer match "
        f"{package} {engine.pinned_version}'s source:\n  " + "\n  ".join(problems))


def test_every_phase_marker_of_the_pinned_release_carries_source_evidence():
    for package in ("sglang", "vllm"):
        engine = get_engine(package)
        for m in engine.phase_markers():
            assert m.evidence, f"specc/engines/{package}.py: phase {m.name} has no evidence"


def test_doctor_with_the_real_engines(compose):
    """`inv doctor`'s checks, run by the pinned releases themselves."""
    from specc.run.doctor import check_plan

    sweep = ["+experiment=eagle3_sweep"]
    plan = compile_config(compose(sweep + ["server.cuda_graph_max_bs=64"])).plan
    py = str(engine_python("sglang"))
    assert check_plan(plan, python=py) == []
    # what the incident-era specc emitted: 0.5.23's parser refuses it, one line per server
    old_flag = compile_config(compose(sweep + ["engine.extra_args=[--cuda-graph-max-bs,8]"])).plan
    problems = check_plan(old_flag, python=py)
    assert len(problems) == len(old_flag.servers)
    assert all(d.code == "DOCTOR_REJECTED" and "ambiguous option: --cuda-graph-max-bs" in d.message
               for d in problems)
    # a plan for another release than the installed one
    (d,) = check_plan(compile_config(compose(sweep + ["engine.version=0.5.13"])).plan, python=py)
    assert d.code == "DOCTOR_VERSION" and "has sglang 0.5.23" in d.message


def test_an_unreachable_registry_is_told_apart_from_a_missing_release(monkeypatch):
    from venvs import index_reachable

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    ok, why = index_reachable(Path(sys.executable))
    assert not ok and "127.0.0.1:9" in why
