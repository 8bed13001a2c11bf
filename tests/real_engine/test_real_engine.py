"""specc driving a real vLLM (its CPU build) end to end: what a user would notice.

vLLM's CPU build serving the tiny models on this machine's CPU (`specc cpu-engine`, `specc
tiny-models`; docs/real-engine.md). Deselected from the default run (marker real_engine);
`.ci/real-engine` builds what they need (cached) and runs them. One server at a time: the
machine's cores are the engine's. (No conftest.py here: other test files import the
top-level one as `conftest`.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))   # agreement.py, beside this file


@pytest.fixture(scope="session")
def engine_bin() -> Path:
    """The CPU engine venv's bin/ (built once; ~20 min on a busy 2-core machine)."""
    from specc.cpu import engine_venv

    return engine_venv.ensure(log=lambda m: print(m, file=sys.stderr)).parent


@pytest.fixture(scope="session")
def tiny(engine_bin) -> dict:
    """The tiny models, in their default cache dir (what conf/model_pair/tiny_cpu.yaml
    names), checked: the target predicts from the current token alone and answers open
    with characters split across tokens."""
    from specc.cpu import models

    info = models.ensure(engine_bin / "python", check=True)
    assert info["check"]["context_free"], info
    assert info["check"]["answer"].startswith("é☕"), info
    return info


@pytest.fixture
def specc_env(engine_bin, tiny) -> dict:
    """`specc`'s environment, as the README's command has it: no engine venv on PATH (the
    plan launches engine.python's `vllm`)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def specc_argv(run_dir: Path, *overrides: str) -> list[str]:
    """The tiny_cpu experiment, executed, on a free port unless the overrides name one (the
    machine may run other servers on vLLM's default 8000)."""
    from agreement import free_port

    port = [] if any(o.startswith("engine.base_port=") for o in overrides) else \
        [f"engine.base_port={free_port()}"]
    return [sys.executable, "-m", "specc", "+experiment=tiny_cpu", "execute=true",
            f"hydra.run.dir={run_dir}", *port, *overrides]


def run_specc(run_dir: Path, env: dict, *overrides: str, timeout: float = 1500):
    proc = subprocess.run(specc_argv(run_dir, *overrides), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


#: EAGLE-3 with 3 speculative tokens, on chat and on completions (the experiment's sweep
#: replaced: Hydra merges a dict override into the one there), without its baseline: one
#: start. The baseline's start, its startup phases and the speedups paired with it are
#: test_deploy_real_engine.py's search (the same tiny_cpu servers), not started twice.
EAGLE3_CHAT_AND_COMPLETIONS = (
    "~sweep", "+sweep={speculation:[{algorithm:EAGLE3,num_steps:3,topk:1,num_draft_tokens:4}],"
    "benchmark.api:[chat,completions]}", "baseline=false")


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _requests(run_dir: Path, bench_id: str) -> list[dict]:
    path = run_dir / "requests" / f"{bench_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _left_behind(marker: str) -> list[str]:
    """Processes whose command line holds `marker` (the run dir, the model path)."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marker in cmd and p.pid != os.getpid():
            out.append(f"{p.pid}: {cmd[:160]}")
    return out


class HealthProber(threading.Thread):
    """A side prober, as a user's `curl` loop: GET /health every PROBE_S; records the epoch
    time of every answer 200 that follows one that was not (each server's first 200)."""

    PROBE_S = 0.05

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/health"
        self.first_200: list[float] = []
        self.halt = threading.Event()

    def run(self):
        import httpx

        was_up = False
        with httpx.Client(timeout=1.0) as client:
            while not self.halt.is_set():
                sent = time.time()
                try:
                    up = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    up = False
                if up and not was_up:
                    self.first_200.append(sent)
                was_up = up
                self.halt.wait(self.PROBE_S)


@pytest.fixture(scope="module")
def eagle3_run(tmp_path_factory, engine_bin, tiny):
    """One real run: EAGLE-3 (3 tokens), chat and completions, concurrency 1; a side
    prober watching the server's /health all along."""
    from agreement import free_port

    run_dir = tmp_path_factory.mktemp("real") / "run"
    port = free_port()
    prober = HealthProber(port)
    prober.start()
    t0 = time.monotonic()
    try:
        code, out, err = run_specc(run_dir, dict(os.environ), *EAGLE3_CHAT_AND_COMPLETIONS,
                                   "benchmark.concurrency=1", f"engine.base_port={port}")
    finally:
        prober.halt.set()
        prober.join(10)
    print(f"real run: {time.monotonic() - t0:.0f} s")
    return run_dir, code, out, err, prober.first_200


def test_every_point_ok_on_chat_and_completions(eagle3_run):
    """Answers open with characters split across tokens ("é☕" as lone bytes: text-less
    stream chunks); every point is ok and every request counted all its tokens."""
    run_dir, code, out, err, _ = eagle3_run
    assert code == 0, (out + err)[-3000:]
    rows = _rows(run_dir)
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), rows
    assert {r["params"]["api"] for r in rows} == {"chat", "completions"}
    for r in rows:
        reqs = _requests(run_dir, r["benchmark"])
        assert reqs and all(q["ok"] for q in reqs)
        assert {q["output_tokens"] for q in reqs} == {r["params"]["output_len"]}, r["benchmark"]
        assert r["metrics"]["total_output_tokens"] == len(reqs) * r["params"]["output_len"]


def test_readiness_recognises_every_startup_phase(eagle3_run):
    """The real CPU startup log: every phase specc shows is one it recognised (no `(?)`),
    and each server was ready (its log's own ready line)."""
    run_dir, code, out, err, _ = eagle3_run
    progress = out + err
    starts = re.findall(r"server (\S+): ready after", progress)
    assert len(starts) == 1, progress[-3000:]
    guessed = [line for line in progress.splitlines()
               if re.match(r"\d\d:\d\d:\d\d server ", line) and "(?)" in line]
    assert not guessed, guessed
    for log in (run_dir / "servers").glob("*.log"):
        assert "Application startup complete." in log.read_text(errors="replace")


def test_ready_within_a_quarter_second_of_the_first_health_200(eagle3_run):
    """specc calls the server ready (state.json `ready_at`) within 0.25 s of the first
    /health 200 a side prober saw, never before the server answered."""
    run_dir, code, out, err, first_200 = eagle3_run
    state = json.loads((run_dir / "state.json").read_text())
    ready = sorted(s["ready_at"] for s in state["servers"].values())
    assert len(ready) == 1 and len(first_200) >= 1, (ready, first_200)
    for at in ready:
        seen = max((t for t in first_200 if t <= at + HealthProber.PROBE_S), default=None)
        assert seen is not None, (at, first_200)
        print(f"ready_at - the prober's first /health 200: {at - seen:+.3f} s")
        # the prober's answer may come up to one of its intervals after the server's first
        assert -HealthProber.PROBE_S - 0.05 <= at - seen <= 0.25, (at, seen, first_200)


def test_acceptance_from_the_engines_counters(eagle3_run):
    """EAGLE-3's acceptance, read from vLLM's own /metrics counters: the constructed draft
    predicts what the target will, so nearly every drafted token is accepted."""
    run_dir, code, out, err, _ = eagle3_run
    plan = json.loads((run_dir / "plan.json").read_text())
    eagle3 = {s["id"] for s in plan["servers"] if s["params"]["algorithm"] == "EAGLE3"}
    spec = [r for r in _rows(run_dir) if r["server"] in eagle3]
    assert len(spec) == 2, spec
    for r in spec:
        per_pos, m = r["accept_per_position"], r["metrics"]
        assert len(per_pos) == 3 and per_pos[0] >= 0.5, per_pos
        assert 1 + sum(per_pos) == pytest.approx(m["accept_length"], abs=0.05), (per_pos, m)
        assert m["accept_length"] >= 2.5, m["accept_length"]
    report = (run_dir / "report.md").read_text()
    assert "EAGLE3" in report and "accept" in report.lower()


def _wait_for(pred, timeout: float, what: str, proc=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"specc exited ({proc.returncode}) before {what}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _engine_core(run_dir: Path):
    """The server's engine core process (a child of `vllm serve`), once it exists."""
    import psutil

    try:
        state = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    for s in state.get("servers", {}).values():
        try:
            for child in psutil.Process(s["pid"]).children(recursive=True):
                if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                    return child
        except (KeyError, psutil.Error):
            continue
    return None


def _benchmarking(run_dir: Path) -> bool:
    """A server of the run is sending a point's requests (state.json says so)."""
    try:
        state = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return any(s.get("status") == "benchmarking" for s in state.get("servers", {}).values())


def test_engine_core_killed_mid_benchmark(tmp_path, specc_env, tiny):
    """kill -9 of the engine core while requests are in flight: exit 3, the point failed
    with the engine's own last fatal line named, and nothing of the server left running."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        specc_argv(run_dir, "speculation=none", "sweep=null", "benchmark.concurrency=1",
                   "benchmark.output_len=512", "benchmark.num_prompts=40"),
        cwd=REPO, env=specc_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: _benchmarking(run_dir), 900, "the first point", proc)
        time.sleep(2)   # requests in flight
        core = _engine_core(run_dir)
        assert core is not None, "no engine core process under the server"
        core.kill()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert proc.returncode == 3, out[-3000:]
    rows = _rows(run_dir)
    assert rows and rows[0]["status"] == "failed", rows
    reason = rows[0]["reason"] or ""
    assert "EngineCore encountered" in reason, reason   # the engine's own words, not a guess
    time.sleep(1)
    assert not _left_behind(tiny["target"]), _left_behind(tiny["target"])


def test_ctrl_c_tears_the_server_down_within_seconds(tmp_path, specc_env, tiny):
    """Ctrl-C while the real server starts: specc stops it and exits within seconds,
    leaving no process behind."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        specc_argv(run_dir, "speculation=none", "sweep=null", "benchmark.concurrency=1"),
        cwd=REPO, env=specc_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        _wait_for(lambda: _engine_core(run_dir), 900, "the engine core", proc)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)   # what a terminal's Ctrl-C does
        out, _ = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]
    assert took < 30, f"{took:.0f} s to stop\n{out[-2000:]}"
    time.sleep(1)
    assert not _left_behind(tiny["target"]), _left_behind(tiny["target"])


def test_a_draft_path_gone_at_run_time_fails_once_with_the_engines_own_error(tmp_path, specc_env,
                                                                           tiny):
    """A draft that is gone when the plan runs (compile refuses a missing path, MODEL_PATH,
    so it is removed after compiling): the point fails with vLLM's own error as one line,
    the server was launched once (no retry loop), and specc exits 3 promptly."""
    import shutil

    from agreement import free_port

    draft = tmp_path / "draft"
    shutil.copytree(tiny["draft"], draft)
    run_dir = tmp_path / "run"
    compiled = subprocess.run(
        [sys.executable, "-m", "specc", "+experiment=tiny_cpu", "sweep=null", "baseline=false",
         "speculation={algorithm:EAGLE3,num_steps:3,topk:1,num_draft_tokens:4}",
         f"model_pair.draft.path={draft}", f"hydra.run.dir={run_dir}",
         f"engine.base_port={free_port()}"],
        cwd=REPO, env=specc_env, capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    shutil.rmtree(draft)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specc", "run", "--plan",
                           str(run_dir / "plan.json")], cwd=REPO, env=specc_env,
                          capture_output=True, text=True, timeout=900)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]
    (row,) = _rows(run_dir)
    reason = row["reason"] or ""
    assert row["status"] == "failed" and "\n" not in reason, reason
    assert str(draft) in reason, reason   # the engine's own words, naming the path
    (log,) = (run_dir / "servers").glob("*.log")
    text = log.read_text(errors="replace")
    assert text.count("vLLM API server version") <= 1 and len(re.findall(r"non-default args", text)) == 1, \
        "the server was started more than once"
    assert len(re.findall(r"server \S+: launch", out)) <= 1, out[-3000:]
    print(f"failed in {took:.0f} s: {reason}")
    assert not _left_behind(str(draft)), _left_behind(str(draft))
