"""hardware=cpu: a real engine's CPU build on this machine, no GPU (conf/hardware/cpu.yaml,
docs/real-engine.md). What the compiled plan says and what the compiler refuses."""

from __future__ import annotations

from pathlib import Path

from specc.compile.pipeline import compile_config

#: The tiny pair's config.json files as `specc tiny-models` writes them (no weights: the
#: compile reads config.json; the suite needs no engine venv to build the models).
TINY_MODELS = Path(__file__).resolve().parent / "fixtures" / "tiny_models"
TINY_PATHS = [f"model_pair.{role}.{key}={TINY_MODELS / role}"
              for role in ("target", "draft") for key in ("path", "facts_for")]
TINY = ["+experiment=tiny_cpu", *TINY_PATHS]


def _compile(compose, *overrides):
    return compile_config(compose([*TINY, *overrides]))


def _errors(result) -> dict:
    return {d.code: d for d in result.diagnostics if d.severity == "error"}


def test_servers_run_one_at_a_time_without_gpus_on_the_kv_cache_they_are_given(compose):
    result = _compile(compose)
    assert result.ok, [d.line() for d in result.diagnostics]
    servers = result.plan.servers
    assert len(servers) == 4 and [s.wave for s in servers] == [0, 1, 2, 3]
    assert {s.port for s in servers} == {31000} and all(s.gpus == () for s in servers)
    for s in servers:
        assert "CUDA_VISIBLE_DEVICES" not in s.env
        assert s.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
        assert s.env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
        assert "--gpu-memory-utilization" not in s.argv and "--enforce-eager" in s.argv
    spec = [s for s in servers if not s.baseline]
    assert {s.params.algorithm for s in spec} == {"EAGLE3", "NGRAM"}


def test_the_kv_cache_and_threads_follow_the_hardware(compose):
    result = _compile(compose, "hardware.kv_cache_gb=3", "hardware.threads_bind=0-1")
    s = result.plan.servers[0]
    assert (s.env["VLLM_CPU_KVCACHE_SPACE"], s.env["VLLM_CPU_OMP_THREADS_BIND"]) == ("3", "0-1")


def test_an_engine_without_a_cpu_build_is_refused(compose):
    errors = _errors(_compile(compose, "engine=sglang"))
    assert "HARDWARE_CPU_ENGINE" in errors
    assert errors["HARDWARE_CPU_ENGINE"].path == "hardware.device"


def test_one_rank_per_server_and_no_gpu_knobs(compose):
    errors = _errors(_compile(compose, "hardware.tp=2"))
    assert errors["HARDWARE_CPU_RANKS"].path == "hardware.tp"
    errors = _errors(_compile(compose, "server.mem_fraction=0.8"))
    assert "hardware.kv_cache_gb" in errors["HARDWARE_CPU_KNOB"].hint


def test_sequences_that_outgrow_the_kv_cache_are_refused_naming_the_size_that_fits(compose):
    """The tiny target's KV costs 2 KiB a token (bf16): 1 GiB holds 524,288 tokens, what
    vLLM's CPU build logs ("CPU KV cache size: 524,288 tokens"); 300 x 2000 do not fit."""
    result = _compile(compose, "benchmark.concurrency=300", "benchmark.output_len=1000",
                      "benchmark.input_len=1000", "benchmark.dataset=random",
                      "sweep=null", "speculation=none")
    err = _errors(result)["MEMORY_KV"]
    assert err.path == "hardware.kv_cache_gb" and "hardware.kv_cache_gb=2" in err.hint


def test_host_memory_must_hold_weights_kv_cache_and_the_engine(compose):
    err = _errors(_compile(compose, "hardware.memory_gb=2"))["MEMORY_WEIGHTS"]
    assert err.path == "hardware.memory_gb" and "1 GiB" in err.message


def test_a_cpu_hardware_needs_its_memory_and_kv_cache_not_a_gpus(compose):
    from specc.config import schema

    cfg = compose([*TINY])
    del cfg["hardware"]["kv_cache_gb"]
    found = schema.validate(cfg)
    assert any("kv_cache_gb" in d.path for d in found), [d.line() for d in found]
