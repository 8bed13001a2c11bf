"""Engine adapters state, at compile time, how the runtime reads acceptance and flushes the cache."""

from __future__ import annotations

import pytest

from specc.compile.pipeline import compile_config
from specc.engines import get_engine


def _servers(overrides):
    from conftest import compose_config

    result = compile_config(compose_config(overrides))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return result.plan.servers


LLAMA = ["model_pair=llama3_8b_eagle3", "hardware=h200x1", "model_pair.context_length=2048"]


def test_sglang_reads_verify_calls_and_falls_back_to_the_cumulative_average():
    spec = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang"]) if not s.baseline)
    assert spec.acceptance.run.denominator == "sglang:spec_verify_calls_total"
    assert spec.acceptance.run.offset == 0.0
    assert spec.acceptance.cumulative.scope == "cumulative"


def test_sglang_without_metrics_has_only_the_cumulative_figure():
    spec = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang",
                                     "engine.enable_metrics=false"]) if not s.baseline)
    assert spec.acceptance.run is None and spec.acceptance.cumulative is not None


def test_vllm_acceptance_is_one_plus_accepted_per_draft():
    spec = next(s for s in _servers([*LLAMA, "engine=vllm", "speculation=eagle3"])
                if not s.baseline)
    assert (spec.acceptance.run.numerator, spec.acceptance.run.denominator,
            spec.acceptance.run.offset) == ("vllm:spec_decode_num_accepted_tokens_total",
                                            "vllm:spec_decode_num_drafts_total", 1.0)
    assert spec.acceptance.cumulative is None


def test_vllm_flushes_the_prefix_cache_in_dev_mode_which_specc_sets():
    """/reset_prefix_cache exists only with VLLM_SERVER_DEV_MODE=1 (else 404 and a warm
    cache): specc sets it for every server some point of which flushes, and says so."""
    (server,) = _servers([*LLAMA, "engine=vllm", "speculation=none"])
    assert (server.cache_flush.method, server.cache_flush.path) == ("POST", "/reset_prefix_cache")
    assert server.env["VLLM_SERVER_DEV_MODE"] == "1"
    (server,) = _servers([*LLAMA, "engine=vllm", "speculation=none", "benchmark.flush_cache=false"])
    assert "VLLM_SERVER_DEV_MODE" not in server.env
    # the config turning dev mode off: no flush, and why
    (server,) = _servers([*LLAMA, "engine=vllm", "speculation=none",
                          "+engine.env.VLLM_SERVER_DEV_MODE=0"])
    assert server.cache_flush.path is None
    assert "VLLM_SERVER_DEV_MODE=1" in server.cache_flush.unavailable
    assert server.env["VLLM_SERVER_DEV_MODE"] == "0"


def test_a_baseline_has_no_acceptance_to_read():
    base = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang"]) if s.baseline)
    assert base.acceptance is None


# --- facts keyed by engine release ---------------------------------------------------

def test_versions_sort_as_releases_do():
    from specc.engines.base import for_version, parse_version

    assert parse_version("0.5.9") < parse_version("0.5.13") < parse_version("0.5.15")
    assert parse_version("0.5.15") < parse_version("0.5.15.post1") < parse_version("0.5.16")
    assert parse_version("0.33") == parse_version("0.33.0")
    table = [("0.5.14", "new"), ("0.5.0", "old")]
    assert [for_version(v, table) for v in ("0.5.23", "0.5.14", "0.5.13", "0.4.0")] == \
        ["new", "new", "old", "old"]
    with pytest.raises(ValueError):
        parse_version("latest")


def test_adapters_default_to_the_pinned_release():
    assert get_engine("sglang").version == "0.5.23"
    assert get_engine("sim").version == "0.5.23"
    assert get_engine("vllm").version == "0.33.0"
    assert get_engine("vllm", "0.16.0").version_note() is None
    assert "newer than 0.5.23" in get_engine("sglang", "0.5.24").version_note()


def test_sglang_cuda_graph_flag_per_release():
    # 0.5.23's parser rejects --cuda-graph-max-bs as ambiguous (-decode / -prefill)
    assert get_engine("sglang").server_flag("cuda_graph_max_bs") == "--cuda-graph-max-bs-decode"
    assert get_engine("sglang", "0.5.13").server_flag("cuda_graph_max_bs") == "--cuda-graph-max-bs"


KNOBS = ["server.max_running_requests=64", "server.mem_fraction=0.85",
         "server.cuda_graph_max_bs=32", "server.dtype=bfloat16", "server.kv_cache_dtype=fp8_e4m3",
         "server.quantization=fp8", "model_pair.context_length=2048"]


def _argv(compose, overrides):
    from specc.compile.pipeline import compile_config

    result = compile_config(compose(overrides))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return {("baseline" if s.baseline else "spec"): s.argv for s in result.plan.servers}


def _flag(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("engine, version, flags", [
    ("sglang", "0.5.23", {"--max-running-requests": "64", "--mem-fraction-static": "0.85",
                          "--cuda-graph-max-bs-decode": "32", "--dtype": "bfloat16",
                          "--kv-cache-dtype": "fp8_e4m3", "--quantization": "fp8",
                          "--context-length": "2048"}),
    ("sglang", "0.5.13", {"--cuda-graph-max-bs": "32", "--mem-fraction-static": "0.85"}),
    ("sim", "0.5.23", {"--max-running-requests": "64", "--cuda-graph-max-bs-decode": "32"}),
    ("vllm", "0.33.0", {"--max-num-seqs": "64", "--gpu-memory-utilization": "0.85",
                        "--max-cudagraph-capture-size": "32", "--dtype": "bfloat16",
                        "--kv-cache-dtype": "fp8_e4m3", "--quantization": "fp8",
                        "--max-model-len": "2048"}),
])
def test_each_server_knob_becomes_the_engines_own_flag(compose, engine, version, flags):
    argv = _argv(compose, KNOBS + [f"engine={engine}", f"engine.version={version}"])["baseline"]
    assert {f: _flag(argv, f) for f in flags} == flags


def test_unset_knobs_emit_no_flag_so_the_engine_keeps_its_default(compose):
    """Issue 17 item 5: specc wrote --gpu-memory-utilization 0.9 over vLLM 0.33's 0.92."""
    for engine, flags in (("sglang", ("--max-running-requests", "--mem-fraction-static",
                                      "--cuda-graph-max-bs-decode", "--dtype", "--kv-cache-dtype",
                                      "--quantization", "--context-length")),
                          ("vllm", ("--max-num-seqs", "--gpu-memory-utilization",
                                    "--max-cudagraph-capture-size", "--dtype", "--kv-cache-dtype",
                                    "--quantization", "--max-model-len"))):
        cfg = compose([f"engine={engine}", "model_pair=kimi_k25_eagle3"])
        assert all(v is None for v in cfg["server"].values())
        for argv in _argv(compose, [f"engine={engine}", "model_pair=kimi_k25_eagle3"]).values():
            assert not set(flags) & set(argv), (engine, argv)


def test_vllm_graph_size_counts_each_requests_verified_tokens(compose):
    """server.cuda_graph_max_bs is requests; vLLM's --max-cudagraph-capture-size is tokens, and a
    speculative step verifies 1 + num_speculative_tokens per request (config/vllm.py)."""
    argv = _argv(compose, KNOBS + ["engine=vllm", "speculation.num_steps=3",
                                   "speculation.num_draft_tokens=4"])
    assert _flag(argv["baseline"], "--max-cudagraph-capture-size") == "32"
    assert _flag(argv["spec"], "--max-cudagraph-capture-size") == str(32 * (1 + 3))


def test_vllm_memory_fraction_default_is_the_releases_own():
    from specc.engines import vllm

    assert vllm.for_version("0.33.0", vllm.GPU_MEMORY_UTILIZATION_DEFAULT) == 0.92
    assert ("vllm/config/cache.py", "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)") \
        in [(path, text) for _, path, text in get_engine("vllm").source_evidence()]


def _markers(engine):
    return {m.name: m for m in engine.phase_markers()}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_every_phase_pattern_matches_the_lines_its_release_prints(version):
    import re

    for m in get_engine("sglang", version).phase_markers():
        assert m.samples, m.name
        begin, end = m.samples[0], m.samples[-1]
        assert any(re.search(p, begin) for p in m.begin), (version, m.name, begin)
        assert any(re.search(p, end) for p in m.end), (version, m.name, end)
    for m in get_engine("vllm").phase_markers():
        assert any(re.search(p, m.samples[0]) for p in m.begin), m.name


def test_sglang_0_5_23_phase_order_and_markers():
    names = [m.name for m in get_engine("sglang").phase_markers()]
    # both models' weights are one phase: the draft's "Load weight begin" follows the
    # target's and cannot be told from a later TP rank's target line
    assert names == ["load_weights", "kv_cache", "capture_cuda_graph",
                     "capture_draft_cuda_graph", "capture_draft_extend_cuda_graph", "warmup"]
    import re

    m = _markers(get_engine("sglang"))
    for name, line in [
            ("capture_cuda_graph", "Capture target verify CUDA graph begin. backend=full"),
            ("capture_cuda_graph", "Capture target decode CUDA graph begin. backend=full"),
            ("capture_draft_cuda_graph", "Capture draft decode CUDA graph begin. backend=full"),
            ("capture_draft_extend_cuda_graph", "Capture draft extend CUDA graph begin. x")]:
        assert any(re.search(p, line) for p in m[name].begin), (name, line)
    # the early-2026 strings are another release's, not 0.5.23's...
    assert not any(re.search(p, "Capture draft cuda graph begin. This can take")
                   for p in m["capture_draft_cuda_graph"].begin)
    # ...and that release's order had the draft's weights after the target's graphs
    old = [m.name for m in get_engine("sglang", "0.5.9").phase_markers()]
    assert old.index("load_draft_weights") > old.index("capture_cuda_graph")
    old_m = _markers(get_engine("sglang", "0.5.9"))
    assert any(re.search(p, "Capture draft extend cuda graph begin.")
               for p in old_m["capture_draft_extend_cuda_graph"].begin)


def test_readiness_phases_are_lists_of_patterns_in_the_plan(compose):
    from specc.compile.matrix import SERVER_SECTIONS, spec_for as _spec_for

    cfg = compose(["model_pair.context_length=2048", "speculation.num_steps=1",
                   "speculation.topk=1", "speculation.num_draft_tokens=2"])
    spec = _spec_for({k: cfg[k] for k in SERVER_SECTIONS})
    r = get_engine("sglang").readiness(spec)
    names = [p.name for p in r.phases]
    assert "capture_draft_cuda_graph" not in names   # num_steps 1: no draft decode graph
    assert names[:3] == ["launch", "load_weights", "kv_cache"]
    assert all(p.begin for p in r.phases[1:])


def test_vllm_cache_flush_sets_dev_mode_in_the_server_env(compose):
    from specc.compile.matrix import SERVER_SECTIONS, spec_for as _spec_for

    cfg = compose(["engine=vllm", "model_pair.context_length=2048"])
    spec = _spec_for({k: cfg[k] for k in SERVER_SECTIONS})
    env, _ = get_engine("vllm").env(spec, [0], flush_cache=True)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    env, _ = get_engine("vllm").env(spec, [0], flush_cache=False)
    assert "VLLM_SERVER_DEV_MODE" not in env
    env, _ = get_engine("sglang").env(spec, [0], flush_cache=True)
    assert "VLLM_SERVER_DEV_MODE" not in env


def test_sglang_acceptance_recipe_follows_the_release():
    """Run-scoped: delta generation tokens / delta verify calls (0.5.13 on); before that
    release only the cumulative average exists, labelled as such."""
    spec = next(s for s in _servers(["+experiment=eagle3_sweep"]) if not s.baseline).acceptance
    assert (spec.run.numerator, spec.run.denominator) == (
        "sglang:generation_tokens_total", "sglang:spec_verify_calls_total")
    old = next(s for s in _servers(["+experiment=eagle3_sweep", "engine.version=0.5.9"])
               if not s.baseline).acceptance
    assert old.run is None and old.cumulative.scope == "cumulative"


VLLM_TWO_NODES = ["+experiment=eagle3_sweep", "engine=vllm",
                  "model_pair=llama3_8b_eagle3", "cluster=slurm", "hardware.gpus_per_node=4",
                  "hardware.nodes=2", "hardware.tp=8", "cluster.nodes_per_server=2"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_join_markers_match_the_lines_the_release_prints_and_no_other_phase(engine):
    import re

    join = get_engine(engine).join_phase
    assert any(re.search(p, join.samples[0]) for p in join.begin)
    assert any(re.search(p, join.samples[-1]) for p in join.end)
    for m in get_engine(engine).phase_markers():   # no other phase begins on a join line
        assert not any(re.search(p, line) for p in m.begin + m.end for line in join.samples)
        assert not any(re.search(p, line) for p in join.begin + join.end for line in m.samples)


def test_a_two_node_vllm_log_waits_in_join_then_loads():
    """Both ranks log into the server's log: the follower's workers' lines must not move
    rank 0's readiness on, and loading starts only after the join's end."""
    from specc.run.readiness import Startup

    (server, *_) = [s for s in _servers(VLLM_TWO_NODES) if s.baseline]
    m = Startup(server.readiness, 0.0)
    log = [
        ("launch", "(EngineCore pid=11) INFO 05-02 10:00:01 [multiproc_executor.py:167] DP group "
                   "leader: node_rank=0, node_rank_within_dp=0, master_addr=10.0.0.5"),
        ("join", "(Worker_TP0 pid=12) INFO [parallel_state.py:1929] world_size=8 rank=0 "
                 f"local_rank=0 distributed_init_method=tcp://10.0.0.5:{server.rendezvous_port} "
                 "backend=nccl"),
        ("join", "(Worker_TP0 pid=31) INFO [parallel_state.py:1929] world_size=8 rank=4 "
                 f"local_rank=0 distributed_init_method=tcp://10.0.0.5:{server.rendezvous_port} "
                 "backend=nccl"),
        ("join", "(Worker_TP0 pid=31) INFO [parallel_state.py:2385] rank 4 in world size 8 is "
                 "assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 4, ETP rank 4"),
        ("join", "(Worker_TP0 pid=12) INFO [parallel_state.py:2385] rank 0 in world size 8 is "
                 "assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, ETP rank 0"),
        ("load_weights", "(Worker_TP0 pid=12) INFO [model_runner.py:301] Loading model from "
                         "scratch..."),
    ]
    seen = []
    for t, (_, line) in enumerate(log, 1):
        m.line(float(t), line)
        seen.append(m.phase)
    assert seen == [phase for phase, _ in log] and not m.guess
    # one node: no join phase, the rendezvous lines are plain progress
    single = _servers(["+experiment=eagle3_sweep", "engine=vllm",
                       "model_pair=llama3_8b_eagle3"])[0]
    assert "join" not in [p.name for p in single.readiness.phases]
