"""Helpers for the executor's end-to-end tests against the simulator.

Compile small plans in-process (Hydra's compose API, the same config the CLI
builds), edit plan.json where a test needs a fault the compiler would refuse,
run the executor in-process or as a subprocess, and make sure no simulator
process outlives a test.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
CONF_DIR = REPO / "conf"
PY = sys.executable

#: A fast plan: the simulator's startup scaled down, tiny prompts, four requests per point.
SMALL = ["engine=sim", "engine.sim.time_scale=0.002", "benchmark.output_len=16",
         "benchmark.input_len=32", "benchmark.num_prompts=4", "model_pair.context_length=2048"]

#: Servers packed one per GPU (TP 1): one wave, all at once.
PACKED_SPEC = ("+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
               "{num_steps:3,topk:1,num_draft_tokens:4},{num_steps:3,topk:4,num_draft_tokens:8}],"
               "benchmark.concurrency:[1,2]}")


# ----------------------------------------------------------------------------- ports
def _free(port: int) -> bool:
    """Bindable the way a server binds (SO_REUSEADDR: a closed server's TIME_WAIT
    connections do not keep its port)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel gives an outgoing connection (Linux's ip_local_port_range;
    32768, its default, where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(n: int = 1) -> int:
    """A base port with n consecutive free ports after it (for engine.base_port), below the
    ports the kernel gives outgoing connections: one of those could be taken by any client
    (a load generator, squeue) between this check and the server's bind, and a Slurm job's
    preflight failed so ("port ... is already in use by another process", 2 suites of 5)."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    top = _ephemeral_low()
    top = top if top - n > 21000 else 60000   # a range that starts low: as before
    for _ in range(200):
        base = rng.randrange(20000, top - n)
        if all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no block of free ports found")


def wait_port_free(port: int, timeout: float = 5.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _free(port):
            return True
        time.sleep(0.05)
    return False


# ----------------------------------------------------------------------------- plans
def compose(overrides=()) -> dict:
    """The plain config dict `python -m specc <overrides>` hands the compiler."""
    from conftest import compose_config

    return compose_config(overrides)


def compile_plan(run_dir: Path, overrides=(), *, port: int | None = None, edit=None):
    """Compile into run_dir (plan.json, plan.sh, review.md); optionally edit plan.json
    (edit(plan_dict) in place) the way a user could before `inv run`. Returns the Plan."""
    from specc.compile.pipeline import compile_config
    from specc.compile.emit import write_outputs
    from specc.plan import Plan

    ov = list(SMALL) + list(overrides)
    if port is not None:
        ov.append(f"engine.base_port={port}")
    config = compose(ov)
    result = compile_config(config)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_outputs(run_dir, result.plan, result.diagnostics, title="executor test")
    if edit is not None:
        data = json.loads((run_dir / "plan.json").read_text())
        edit(data)
        (run_dir / "plan.json").write_text(json.dumps(data, indent=2))
    return Plan.load(run_dir / "plan.json")


def set_server_env(plan_dict: dict, server_index: int, **env) -> str:
    """Put env vars (e.g. SPECC_SIM_FAULT) into one server of a plan dict; returns its id.
    A value of None removes the variable."""
    s = plan_dict["servers"][server_index]
    for k, v in env.items():
        if v is None:
            s["env"].pop(k, None)
        else:
            s["env"][k] = v
    return s["id"]


def execute(plan, run_dir: Path) -> int:
    from specc.run.executor import execute_plan

    return execute_plan(plan, Path(run_dir))


# ----------------------------------------------------------------------------- reading a run
def results(run_dir: Path) -> list[dict]:
    f = Path(run_dir) / "results.jsonl"
    if not f.exists():
        return []
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


def state(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "state.json").read_text())


def plan_json(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "plan.json").read_text())


# ----------------------------------------------------------------------------- processes
def sim_processes(run_dir: Path | None = None, ports=()) -> list[psutil.Process]:
    """Live (non-zombie) `specc.sim` processes started in run_dir (their cwd) or on one of ports."""
    ports = {str(p) for p in ports}
    root = str(Path(run_dir).resolve()) if run_dir else None
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if "specc.sim" not in cmd or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            port = cmd[cmd.index("--port") + 1] if "--port" in cmd else None
            mine = port in ports
            if root and not mine:
                try:
                    mine = p.cwd().startswith(root)
                except psutil.Error:
                    pass
            if mine:
                found.append(p)
        except (psutil.Error, ValueError, IndexError):
            continue
    return found


def wait_no_sim(run_dir: Path | None = None, ports=(), timeout: float = 5.0) -> list[psutil.Process]:
    deadline = time.time() + timeout
    while True:
        left = sim_processes(run_dir, ports)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.05)


def kill_leftovers(procs) -> None:
    """SIGKILL the given processes (started by this test), by pid."""
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class SimGuard:
    """Tracks a test's run dirs/ports; after the test, any live sim process among them
    is killed and reported (the test fails: the executor leaked a server)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.ports: set[int] = set()
        self.children: list[subprocess.Popen] = []

    def port(self, n: int = 1) -> int:
        base = free_port_block(n)
        self.ports.update(range(base, base + n))
        return base

    def spawn(self, argv, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kw)
        self.children.append(proc)
        return proc

    def check(self) -> list[str]:
        for c in self.children:   # executors this test started and left running
            if c.poll() is None:
                c.kill()
                c.wait(5)
        left = wait_no_sim(self.root, self.ports, timeout=3.0)
        kill_leftovers(left)
        return [f"pid {p.pid}" for p in left]


def run_cli(args, *, timeout=120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "specc", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def run_inv(args, *, timeout=120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def wait_for(pred, timeout: float, interval: float = 0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return pred()


# ----------------------------------------------------------------------------- multirun
def tiny_experiments(conf_dir: Path, ports: dict[str, int], env: dict | None = None) -> Path:
    """Experiments NAME (one simulated server, one point of 4 tiny requests) in
    conf_dir/experiment/, each on its own port (`--config-dir conf_dir +experiment=a,b`):
    jobs on fake Slurm nodes share this host. env: NAME -> the server's extra env."""
    (Path(conf_dir) / "experiment").mkdir(parents=True, exist_ok=True)
    for name, port in ports.items():
        extra = "".join(f"\n    {k}: '{v}'" for k, v in ((env or {}).get(name) or {}).items())
        (Path(conf_dir) / "experiment" / f"{name}.yaml").write_text(
            "# @package _global_\ndefaults:\n  - override /engine: sim\n  - _self_\n"
            f"experiment: {name}\nbaseline: false\nhardware: {{tp: 1}}\n"
            f"engine:\n  base_port: {port}\n  sim: {{time_scale: 0.002}}\n  env:{extra or ' {}'}\n"
            "model_pair: {context_length: 2048}\n"
            "benchmark: {output_len: 16, input_len: 32, num_prompts: 4, min_requests: 4}\n")
    return Path(conf_dir)
