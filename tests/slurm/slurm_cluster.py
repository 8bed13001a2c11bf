"""A throw-away Slurm cluster for the session: 4 fake nodes with 8 fake GPUs each on this host,
started with the project's own tools/slurm/slurm-up.sh and stopped after the last test.

Where Slurm cannot be started (not root, no Slurm and no apt-get to install it, a
controller already running here, the script failing) every test here is skipped
with the reason; SPECC_SLURM_REQUIRED=1 (CI) turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "slurm"
NODES = 4
#: Seconds until slurmctld calls a node whose slurmd stopped DOWN (the script's default is 300).
SLURMD_TIMEOUT = 5


def _unavailable(reason: str):
    if os.environ.get("SPECC_SLURM_REQUIRED") == "1":
        pytest.fail(f"Slurm required (SPECC_SLURM_REQUIRED=1) but {reason}")
    pytest.skip(f"no Slurm cluster: {reason}")


def _controller_running() -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", 6817)) == 0


@dataclass
class Cluster:
    root: Path
    env: dict

    def run(self, *argv, check=True, timeout=30) -> subprocess.CompletedProcess:
        r = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode:
            raise AssertionError(f"{' '.join(argv)}: {r.stderr or r.stdout}")
        return r

    def active_jobs(self) -> list[str]:
        """Lines of squeue for every job not yet ended (all users, all runs)."""
        out = self.run("squeue", "-h", "-o", "%i|%T|%j").stdout
        return [ln for ln in out.splitlines() if ln.strip()]

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def slurmd_pid(self, node: str) -> int:
        return int((self.root / "run" / f"slurmd-{node}.pid").read_text())

    def stop_slurmd(self, node: str) -> None:
        """The node fails: its slurmd dies at once (its job's processes are cut off)."""
        os.kill(self.slurmd_pid(node), signal.SIGKILL)

    def start_slurmd(self, node: str) -> None:
        """The node comes back: slurmd re-registers; slurmctld has it kill the orphaned job."""
        self.run("/usr/sbin/slurmd", "-N", node)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.node_states().get(node, "").rstrip("*") in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.2)
        raise AssertionError(f"node {node} did not come back: {self.node_states()}")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        _unavailable("the tests need root (slurm-up.sh starts munged, slurmctld and slurmd)")
    if not shutil.which("slurmctld") and not Path("/usr/sbin/slurmctld").exists() \
            and not shutil.which("apt-get"):
        _unavailable("Slurm is not installed and there is no apt-get to install it")
    if _controller_running():
        _unavailable("a Slurm controller already listens on this host (port 6817); "
                     "stop it (tools/slurm/slurm-down.sh ROOT) to run these tests")
    root = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "NNODES": str(NODES), "GPUS": "8", "SLURMD_TIMEOUT": str(SLURMD_TIMEOUT)}
    try:
        up = subprocess.run(["bash", str(TOOLS / "slurm-up.sh"), str(root)], env=env,
                            capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        _unavailable("slurm-up.sh did not finish in 10 min")
    if up.returncode:
        subprocess.run(["bash", str(TOOLS / "slurm-down.sh"), str(root)], capture_output=True)
        tail = " | ".join((up.stderr or up.stdout).strip().splitlines()[-3:])
        _unavailable(f"slurm-up.sh failed ({up.returncode}): {tail}")
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    os.environ["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"   # sacct without slurmdbd
    cluster = Cluster(root, dict(os.environ))
    try:
        yield cluster
    finally:
        subprocess.run(["bash", str(TOOLS / "slurm-down.sh"), str(root)], capture_output=True,
                       timeout=120)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def cluster(slurm_cluster):
    """The session's cluster, with every node up and no job left by an earlier test."""
    for node, st in slurm_cluster.node_states().items():
        if st.rstrip("*") in ("down", "drained", "draining"):
            slurm_cluster.start_slurmd(node)
    yield slurm_cluster
    left = slurm_cluster.active_jobs()
    if left:
        slurm_cluster.run("scancel", *[ln.split("|")[0] for ln in left], check=False)
    assert not left, f"jobs left in squeue: {left}"



