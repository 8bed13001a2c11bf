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

import ast
import json
import re
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


#: Each shipped model's path -> a local directory holding its config.json (tests/drift/models:
#: the published config.json of each model; Kimi-K2.5's text model as DeepseekV3ForCausalLM,
#: the architecture specc's conf states for it). The engines resolve their arguments
#: against these, offline.
MODELS = Path(__file__).resolve().parent / "models"
LOCAL_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": MODELS / "llama3.1-8b-instruct",
                "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": MODELS / "eagle3-llama3.1-instruct-8b",
                "moonshotai/Kimi-K2.5": MODELS / "kimi-k2.5",
                "AQ-MedAI/Kimi-K25-eagle3": MODELS / "kimi-k25-eagle3",
                "example/Kimi-K25-eagle3-131k": MODELS / "kimi-k25-eagle3-131k"}


def _compose(overrides):
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from conftest import compose_config
    finally:
        sys.path.pop(0)
    return compose_config(overrides)


def compiled_servers(engine: str, *, with_specs: bool = False) -> list[dict]:
    """{id, argv} of every server every shipped experiment (and flag variant) compiles to;
    `with_specs`: also its env, ServerSpec and adapter (what specc predicts it from)."""
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
        specs = _server_specs(result) if with_specs else {}
        for s in result.plan.servers:
            key = tuple(s.argv)
            if key not in seen:
                seen.add(key)
                out.append({"id": f"{' '.join(overrides)} :: {s.id}", "argv": list(s.argv)})
                if with_specs:
                    out[-1].update(env={k: v for k, v in s.env.items()
                                        if k != "CUDA_VISIBLE_DEVICES"},
                                   spec=specs[key], adapter=get_engine(
                                       engine, result.config["engine"].get("version")))
    return out


def _server_specs(result) -> dict:
    """argv -> the ServerSpec the adapter wrote it from (the compile's own matrix)."""
    from specc.compile.matrix import expand
    from specc.config import schema

    cfg = result.config
    adapter = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    matrix, _ = expand(schema.with_defaults(schema.resolve_paths(cfg)), adapter)
    by_argv = {}
    for entry in matrix.servers:
        for s in result.plan.servers:
            if tuple(s.argv) == tuple(adapter.argv(entry.spec, host=s.argv[s.argv.index("--host") + 1]
                                                   if "--host" in s.argv else "127.0.0.1",
                                                   port=s.port, rendezvous_port=s.rendezvous_port)):
                by_argv[tuple(s.argv)] = entry.spec
    return by_argv


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


# --- the engines' own validation: what each release resolves every emitted command to ------

HERE = Path(__file__).resolve().parent
#: Fields whose emitted value the engine may replace only where specc said so.
_KEPT_AS_EMITTED = ("tp_size", "pp_size", "dp_size", "ep_size", "context_length",
                    "mem_fraction_static", "max_running_requests", "dtype", "kv_cache_dtype",
                    "quantization", "attention_backend", "speculative_algorithm",
                    "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "cuda_graph_decode_max_bs")


def _local(argv: list[str]) -> list[str]:
    """The command with each model path (vLLM's draft inside --speculative-config too) the
    local directory of its config.json."""
    out = []
    for a in argv:
        if a.startswith("{") and '"model"' in a:
            cfg = json.loads(a)
            cfg["model"] = str(LOCAL_MODELS.get(cfg["model"], cfg["model"]))
            a = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
        out.append(str(LOCAL_MODELS.get(a, a)))
    return out


def _gpu(spec) -> dict:
    """What the stubbed hardware probes answer: the plan's GPU as specc's config states it,
    its memory read as each adapter reads gpu_memory_gb (SGLang's x 1024 MiB, vLLM's x 1e9
    bytes). Hopper (sm90): the shipped hardware is H100/H200."""
    hw = spec.hardware
    return {"memory_mib": hw["gpu_memory_gb"] * 1024, "memory_bytes": hw["gpu_memory_gb"] * 1e9,
            "count": hw["gpus_per_node"], "capability": [9, 0],
            "name": f"NVIDIA {hw.get('gpu', 'H200').upper()}"}


def sglang_predicted(spec, adapter) -> dict:
    """What specc says SGLang runs a server with, where its command leaves it to SGLang: the
    memory fraction, the running-request cap, the speculative parameters."""
    from specc.engines.sglang import default_spec_params

    out = {"mem_fraction_static": adapter.memory_fraction(spec)[0],
           "max_running_requests": adapter.max_running_requests(spec)[0]}
    if spec.speculative:
        steps, topk, ndt = spec.spec_triple
        if spec.algorithm == "NGRAM":
            out["speculative_num_draft_tokens"] = ndt
        else:
            if steps is None:
                steps, topk, ndt = default_spec_params(spec.target.architecture)
            out.update(speculative_num_steps=steps, speculative_eagle_topk=topk,
                       speculative_num_draft_tokens=ndt,
                       speculative_algorithm={"NEXTN": "EAGLE"}.get(spec.algorithm,
                                                                    spec.algorithm))
    return out


def resolve_with_real_engine(package: str, script: str, servers: list[dict]) -> dict:
    py = engine_python(package)
    request = {"gpu": _gpu(servers[0]["spec"]),
               "servers": [{"id": s["id"], "argv": _local(s["argv"]), "env": s["env"]}
                           for s in servers]}
    proc = subprocess.run([str(py), str(HERE / script)], input=json.dumps(request),
                          capture_output=True, text=True, timeout=900)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail(f"{script} under {package} crashed (exit {proc.returncode}):\n"
                    f"{proc.stderr[-3000:]}")


def _differences(servers: list[dict], script: str, package: str, kept, predicted):
    """(problems, commands resolved): each server through `script` under the pinned release,
    one run per GPU kind; a refusal, an emitted value replaced, or a value other than
    specc's prediction is a problem."""
    by_gpu: dict[str, list[dict]] = {}
    for s in servers:
        by_gpu.setdefault(json.dumps(_gpu(s["spec"]), sort_keys=True), []).append(s)
    problems, resolved_n = [], 0
    for group in by_gpu.values():
        report = resolve_with_real_engine(package, script, group)
        assert report["version"] == get_engine(package).pinned_version
        for s, r in zip(group, report["servers"]):
            assert r["id"] == s["id"]
            if r["error"]:
                problems.append(f"{s['id']}: refused: {r['error']}")
                continue
            resolved_n += 1
            got, parsed = r["resolved"], r["parsed"]
            for field in kept:
                if parsed.get(field) not in (None, "auto") and got.get(field) != parsed[field]:
                    problems.append(f"{s['id']}: emitted {field}={parsed[field]!r}, "
                                    f"{package} resolved {got.get(field)!r}")
            for field, want in predicted(s["spec"], s["adapter"]).items():
                have = got.get(field)
                same = (abs(have - want) < 1e-9 if isinstance(want, float) and have is not None
                        else have == want)
                if not same:
                    problems.append(f"{s['id']}: specc predicts {field}={want!r}, "
                                    f"{package} resolved {have!r}")
    return problems, resolved_n


def test_sglang_resolves_every_emitted_command_as_specc_predicts():
    """Every SGLang command specc emits, through 0.5.23's own ServerArgs resolution
    (resolve_once: every hook, then check_server_args) on an H200 as the plan states it
    (only the hardware probes stubbed: tests/drift/sglang_resolve.py names each). It must
    resolve without error, keep every value specc emitted, and land on what specc predicts
    where the command leaves the choice to SGLang (memory fraction, running-request cap,
    speculative defaults): a setting SGLang would silently rewrite or refuse fails here."""
    problems, resolved_n = _differences(compiled_servers("sglang", with_specs=True),
                                        "sglang_resolve.py", "sglang", _KEPT_AS_EMITTED,
                                        sglang_predicted)
    assert resolved_n >= 10, "too few commands resolved to be a check"
    assert not problems, (f"{len(problems)} difference(s) between what specc emitted or "
                          "predicted and what sglang 0.5.23 resolved:\n  " + "\n  ".join(problems))


_VLLM_KEPT = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
              "max_model_len", "dtype", "quantization", "gpu_memory_utilization",
              "kv_cache_dtype", "max_num_seqs", "max_cudagraph_capture_size",
              "speculative_method", "num_speculative_tokens")


def vllm_predicted(spec, adapter) -> dict:
    """What specc says vLLM runs a server with where the command leaves it to vLLM."""
    from specc.engines.vllm import METHODS

    out = {"gpu_memory_utilization": adapter.memory_fraction(spec)[0],
           "max_num_seqs": adapter.max_running_requests(spec)[0],
           "max_model_len": spec.model_pair.get("context_length") or spec.target.context_length}
    if spec.speculative:
        out.update(speculative_method=METHODS[spec.algorithm],
                   num_speculative_tokens=adapter.num_speculative_tokens(spec))
    return out


def test_vllm_resolves_every_emitted_command_as_specc_predicts():
    """Every vLLM command specc emits, through 0.33.0's own EngineArgs.create_engine_config
    (model, cache, scheduler, parallel, speculative and compilation configs) on the CUDA
    platform of an H200 as the plan states it (only the hardware probes and the compiled
    kernels stubbed: tests/drift/vllm_resolve.py names each). It must build, keep every
    value specc emitted, and land on specc's predictions (memory utilisation, running
    sequences, served length, speculative method and tokens)."""
    servers = [s for s in compiled_servers("vllm", with_specs=True)
               if "{node_rank}" not in s["argv"]   # multi-node: filled in on the nodes
               and s["spec"].hardware.get("device") != "cpu"]   # the CPU build: 0.32.0's own
    # engine checks it (tests/real_engine), not 0.33.0's CUDA platform
    problems, resolved_n = _differences(servers, "vllm_resolve.py", "vllm", _VLLM_KEPT,
                                        vllm_predicted)
    assert resolved_n >= 5, "too few commands resolved to be a check"
    assert not problems, (f"{len(problems)} difference(s) between what specc emitted or "
                          "predicted and what vllm 0.33.0 resolved:\n  " + "\n  ".join(problems))


# --- every marker regex against the line its release really prints --------------------

#: Sample values for placeholders that are words, not numbers (the source text of the
#: placeholder -> what the release puts there).
RENDER_BINDINGS = {
    "sglang": {"role": ["target", "draft"], "graph_backend[model_runner.device]": ["CUDA graph"],
               "cache_name": ["KV Cache"]},
    "vllm": {},
}


def _markers(package: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(what, regex, files whose logging calls print it) for every regex the plan of a
    pinned-release server can hold: phase begins and ends, the ready line, fatal patterns."""
    from specc.engines.base import patterns

    engine = get_engine(package)
    out = []
    for m in tuple(engine.phase_markers()) + (engine.join_phase,):
        files = tuple(dict.fromkeys(f for f, _ in m.evidence))
        for kind, regexes in (("begins", m.begin), ("ends", m.end)):
            out += [(f"phase {m.name} {kind}", r, files) for r in regexes]
    ready_files = tuple(f for m in engine.phase_markers() for f, text in m.evidence
                        if text == engine.ready_line or "startup complete" in text)
    out += [("ready line", r, ready_files) for r in patterns(engine.ready_line)]
    out += [(f"fatal pattern {m.text!r}", r, (m.source,))
            for m, r in zip(engine.fatal_messages, engine.fatal_patterns)]
    return out


@pytest.mark.parametrize("package", ["sglang", "vllm"])
def test_every_marker_regex_matches_the_line_its_release_prints(package):
    """Each phase, ready and fatal regex of the pinned release's adapter, against the lines
    that release's logging calls print (tests/drift/render.py renders each call's format
    string, f-string, %-style or str.format, with sample values): a regex that matches the
    literal in the source but not the rendered line fails here."""
    from render import Renderer

    root = site_packages(engine_python(package))
    rendered: dict[str, list[str]] = {}

    def printed(file: str) -> list[str]:
        if file not in rendered:
            path = root / file
            r = Renderer(path.read_text(), RENDER_BINDINGS[package]) if path.is_file() else None
            rendered[file] = r.logged_lines() + r.raised_and_passed_lines() if r else []
        return rendered[file]

    sources = None
    problems = []
    for what, regex, files in _markers(package):
        assert files, f"{what}: no source file states it"
        lines = [ln for file in files for ln in printed(file)]
        if not any(re.search(regex, line) for line in lines):
            # printed from another file than the evidence names: the files holding the
            # regex's longest literal words
            if sources is None:
                sources = {str(p.relative_to(root)): p.read_text(errors="replace")
                           for p in (root / package).rglob("*.py")}
            # (a literal may be split over implicit concatenation: 24 characters of each)
            keys = [w.strip()[:24] for w in re.findall(r"[A-Za-z][A-Za-z ,/'-]{7,}",
                                                        regex.replace("\\", ""))]
            more = sorted(f for f, text in sources.items() if any(k in text for k in keys))[:20]
            files = (*files, *more)
            lines += [ln for file in more for ln in printed(file)]
        if not any(re.search(regex, line) for line in lines):
            near = [ln for ln in lines if any(w in ln for w in re.findall(r"[A-Za-z]{4,}", regex))]
            problems.append(f"{what}: {regex!r} matches no line {', '.join(files)} prints; "
                            f"nearest: {near[:3]}")
    assert not problems, (f"{len(problems)} regex(es) of specc/engines/{package}.py match no "
                          f"line {package} {get_engine(package).pinned_version} prints:\n  "
                          + "\n  ".join(problems))


# --- SGLang's memory hooks: their order and reserves, and specc's mirror of them ---------

def _sglang_source(file: str) -> ast.Module:
    import ast

    return ast.parse((site_packages(engine_python("sglang")) / "sglang/srt" / file).read_text())


def _function(tree, name: str):
    import ast

    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_sglang_memory_hooks_run_as_specc_models_them():
    """0.5.23's resolution pipeline (srt/arg_groups/pipeline.py, read as code): the memory
    hook runs before the speculative hook, so speculation's running-request cap (48) does not
    size the decode graphs' reserve; the reserve counts the prefill (piecewise) CUDA graph;
    nothing in the memory hook reserves for an EAGLE draft. specc's automatic memory fraction
    (specc/engines/sglang.py auto_mem_fraction_static) must follow each: a release that
    reorders the hooks or changes a reserve fails here."""
    import ast

    from specc.engines import sglang as sg

    pipeline = _function(_sglang_source("arg_groups/pipeline.py"), "run_resolution_pipeline")
    hooks = [c.args[0].id for c in ast.walk(pipeline) if isinstance(c, ast.Call)
             and getattr(c.func, "id", "") == "run_hook" and isinstance(c.args[0], ast.Name)]
    hooks.sort(key=lambda name: next(c.lineno for c in ast.walk(pipeline)
                                     if isinstance(c, ast.Call) and c.args
                                     and getattr(c.args[0], "id", "") == name))
    assert "handle_gpu_memory_settings" in hooks and "handle_speculative_decoding" in hooks
    assert hooks.index("handle_gpu_memory_settings") < hooks.index("handle_speculative_decoding"), \
        "0.5.23 sizes memory before speculation: specc's auto_mem_fraction_static assumes it"

    memory = _sglang_source("arg_groups/memory_hook.py")
    settings = _function(memory, "handle_gpu_memory_settings")
    assert any(getattr(c.func, "id", "") == "reserve_for_graph_mb"
               for c in ast.walk(settings) if isinstance(c, ast.Call))
    graphs = ast.unparse(_function(memory, "reserve_for_graph_mb"))
    assert "prefill_cuda_graph_config.backend != Backend.DISABLED" in graphs
    assert "len(prefill_cuda_graph_config.bs) * 8" in graphs and "1.5 * 1024" in graphs
    text = ast.unparse(memory).lower()
    assert "eagle" not in text and "speculative_algorithm" not in text, \
        "0.5.23's memory hook now reserves for speculation: specc models no EAGLE reserve"

    # the prefill graph's capture sizes, from 0.5.23's own function, as specc counts them
    sizes_fn = _function(_sglang_source("arg_groups/cuda_graph_hook.py"),
                         "generate_prefill_cuda_graph_batch_sizes")
    scope: dict = {}
    exec(compile(ast.Module([sizes_fn], []), "cuda_graph_hook.py", "exec"), scope)
    for tokens in (2048, 4096, 8192, 16384):
        assert sg.prefill_graph_sizes(tokens) == scope[sizes_fn.name](tokens)

    # specc's side: no EAGLE reserve; speculation's default cap does not change the fraction;
    # the prefill graph reserve is there (pp 1) and not with pp > 1 (disabled by default)
    def spec_of(overrides):
        from specc.compile.matrix import expand
        from specc.config import schema

        cfg = compile_config(_compose(overrides)).config
        adapter = get_engine("sglang")
        return expand(schema.with_defaults(schema.resolve_paths(cfg)), adapter)[0].servers, adapter

    servers, adapter = spec_of(["+experiment=llama3_eagle3_pack", "engine=sglang"])
    fractions = {adapter.memory_fraction(e.spec)[0] for e in servers}
    assert len(fractions) == 1, "the baseline and speculative servers get the same fraction"
    assert all(adapter.reserved_gb_per_gpu(e.spec) == 0 for e in servers)
    common = dict(gpu_memory_gb=141, tp=1)
    mem = 141 * 1024
    with_graph = round((mem - (512 + 8192 * 1.5 + 1024 / 8 + 256 * 2 + 58 * 8)) / mem, 3)
    assert sg.auto_mem_fraction_static(**common) == with_graph


# --- the deployed schedule (search=tune's deploy.json) through the releases' validation ---

def _deployed(engine: str, tmp_path):
    """A three-band schedule (s5 below 32, s3 below 128, no drafting above) as specc emits it
    for `engine` from a compiled chain server: (server dict for the resolver, schedule)."""
    from specc.tune import schedule as sch

    server = next(s for s in compiled_servers(engine, with_specs=True)
                  if s["spec"].speculative and s["spec"].algorithm == "EAGLE3"
                  and s["spec"].hardware.get("device") != "cpu" and s["spec"].nodes == 1
                  and s["spec"].hardware.get("dp", 1) == 1)
    bands = {"static": None, "bands": [
        {"from": 1, "to": 31, "setting": {"server": "a", "num_steps": 5, "topk": 1,
                                          "num_draft_tokens": 6}},
        {"from": 32, "to": 127, "setting": {"server": "b", "num_steps": 3, "topk": 1,
                                            "num_draft_tokens": 4}},
        {"from": 128, "to": None, "setting": sch.BASELINE}]}
    fmt = server["adapter"].schedule_format(server["argv"], dp=1, algorithm="EAGLE3")
    assert fmt["why_not"] is None, fmt["why_not"]
    argv, files = sch.launch(fmt, bands, {"a": server["argv"], "b": server["argv"]}, [])
    for name, text in files.items():   # the server runs in the run dir, beside the file
        (tmp_path / name).write_text(text)
        argv = [str(tmp_path / name) if a == name else a for a in argv]
    return {**server, "id": f"deployed schedule of {server['id']}", "argv": argv}, bands


def test_sglang_accepts_the_adaptive_config_specc_deploys(tmp_path):
    """The deployed SGLang command and its --speculative-adaptive-config file, through
    0.5.23's own resolution: _maybe_disable_adaptive keeps it on, _load_adaptive_config
    reads the file, _init_adaptive_speculative_params accepts the starting num_steps,
    check_server_args passes."""
    server, _ = _deployed("sglang", tmp_path)
    report = resolve_with_real_engine("sglang", "sglang_resolve.py", [server])
    r = report["servers"][0]
    assert r["error"] is None, r["error"]
    got = r["resolved"]
    assert got["speculative_adaptive"] is True
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"],
            got["speculative_num_draft_tokens"]) == (5, 1, 6)


def test_vllm_accepts_the_batch_size_schedule_specc_deploys(tmp_path):
    """The deployed vLLM command through 0.33.0's create_engine_config (dynamic SD kept on:
    EAGLE-3, no data parallelism), then the scheduler's own lookup of it: batch sizes route
    to the bands specc meant (specc.sim.adaptive.vllm_lookup agrees entry for entry)."""
    from specc.sim.adaptive import vllm_lookup

    server, bands = _deployed("vllm", tmp_path)
    report = resolve_with_real_engine("vllm", "vllm_resolve.py", [server])
    r = report["servers"][0]
    assert r["error"] is None, r["error"]
    got = r["resolved"]
    assert got["num_speculative_tokens"] == 5
    assert got["num_speculative_tokens_per_batch_size"][:2] == [[1, 31, 5], [32, 127, 3]]
    lookup = got["schedule_lookup"]
    assert (lookup[1], lookup[31], lookup[32], lookup[127]) == (5, 5, 3, 3)
    assert all(k == 0 for k in lookup[128:])
    assert lookup == vllm_lookup(got["num_speculative_tokens_per_batch_size"],
                                 got["max_num_seqs"], 5)
