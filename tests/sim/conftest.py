"""Helpers: start ``python -m specc.sim`` as a real subprocess on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimProc:
    def __init__(self, args: list[str], env: dict | None = None, tmp: Path | None = None,
                 port: int | None = None):
        self.port = port or free_port()
        self.log_path = (tmp or Path("/tmp")) / f"sim-{self.port}.log"
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = dict(os.environ)
        full_env.pop("SPECC_SIM_FAULT", None)
        full_env.pop("SPECC_SIM_TRUTH", None)
        full_env.update(env or {})
        self.logf = open(self.log_path, "w")
        argv = [sys.executable, "-m", "specc.sim", "--port", str(self.port)]
        if not any(a.startswith("--sim-time-scale") for a in args):
            argv += ["--sim-time-scale", "0.002"]
        self.proc = subprocess.Popen(argv + args, cwd=ROOT, env=full_env, stdout=self.logf,
                                     stderr=subprocess.STDOUT)

    def log(self) -> str:
        self.logf.flush()
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sim exited {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"sim not ready:\n{self.log()}")

    def wait_log(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in log:\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM, as a runner stops a server: the simulator writes out its truth log's
        last events (buffered up to 0.1 s) and exits. A SIGKILL lost them on a busy
        machine: a test reading the log after stop() missed the last decode step."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.logf.close()


@pytest.fixture
def start_sim(tmp_path):
    procs: list[SimProc] = []

    def _start(*args: str, env: dict | None = None, port: int | None = None) -> SimProc:
        p = SimProc(list(args), env=env, tmp=tmp_path, port=port)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        p.stop()


SPEC_ARGS = ["--model-path", "sim/kimi", "--tp-size", "2", "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", "sim/draft", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def shared_sim(tmp_path_factory):
    """One speculative sim server shared by the endpoint-shape tests."""
    p = SimProc(SPEC_ARGS + ["--enable-metrics"], tmp=tmp_path_factory.mktemp("sim"))
    try:
        p.wait_ready()
        yield p
    finally:
        p.stop()
