"""Virtual environments holding the REAL released engines, for the drift check.

Each engine release gets one venv under ``$SPECC_DRIFT_CACHE`` (default
``~/.cache/specc-drift``), keyed by engine, version and the recipe's hash: the engine's own wheel
installed without its dependencies (no CUDA stack), plus the few packages its
argument parser imports, with the CPU build of torch. Built once, reused while
its recipe is unchanged (a ``.complete`` stamp holds the recipe's hash).

The recipes (which wheel, which parser imports, CPU torch) are this module's own, so a
clean clone installs everything from its own files. Only the
package registry pip is configured for is used; when it cannot be reached,
``RegistryUnreachable`` is raised (the test module skips on it, and only on it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPECC_DRIFT_CACHE", Path.home() / ".cache" / "specc-drift"))

#: torch: the CPU build (on this kind of machine a wheel of it lies on disk; pip
#: finds it through its configured find-links). Nothing here needs a GPU.
TORCH = "torch==2.13.0"

RECIPES = {
    # what sglang.srt.server_args's parser imports + uvicorn (its log line is checked), and
    # what ServerArgs.resolve_once imports (transformers reads the models' config.json; the
    # rest are imported at module level by the config and quantization modules).
    # torchvision stays out: PyPI's is a CUDA build that cannot load beside the CPU torch
    # (it also pulls a CUDA torch), transformers does not need it, and sglang only imports
    # it (sglang_resolve.py stubs it).
    "sglang": {"constraints": ["constraints-sglang.txt"],
               "deps": [TORCH, "numpy", "orjson", "psutil", "pybase64", "requests", "packaging",
                        "pillow", "starlette", "typing_extensions", "msgspec", "pydantic",
                        "pyzmq", "tqdm", "IPython", "aiohttp", "uvicorn", "transformers",
                        "dill", "apache-tvm-ffi", "sentencepiece", "compressed-tensors",
                        "gguf"]},
    # what `vllm serve`'s parser and its config classes import
    "vllm": {"constraints": ["constraints-vllm.txt"],
             "deps": [TORCH, "packaging", "huggingface_hub", "regex", "pydantic", "numpy", "cbor2",
                      "psutil", "pyzmq", "urllib3", "transformers<5.21.0", "aiohttp", "requests",
                      "openai-harmony", "openai", "msgspec", "cloudpickle", "pillow", "pybase64",
                      "cachetools", "uvloop", "py-cpuinfo", "prometheus_client", "xgrammar",
                      "fastapi", "partial_json_parser", "llguidance", "uvicorn", "watchfiles",
                      "orjson", "einops", "compressed-tensors"]},
}

#: pip output that means the registry could not be reached (not: the version is missing).
_UNREACHABLE = ("NewConnectionError", "Temporary failure in name resolution",
                "Failed to establish a new connection", "Network is unreachable",
                "Connection refused", "ConnectTimeoutError", "ReadTimeoutError",
                "Max retries exceeded", "Could not fetch URL", "No route to host",
                "[Errno 101]", "[Errno 111]", "[Errno -2]", "[Errno -3]")


class RegistryUnreachable(RuntimeError):
    """pip could not reach its package registry."""


class BuildFailed(RuntimeError):
    """The venv could not be built for another reason (a missing release, a broken wheel)."""


def _recipe_hash(engine: str, version: str) -> str:
    r = RECIPES[engine]
    text = json.dumps({"engine": engine, "version": version, "deps": r["deps"],
                       "constraints": {c: (HERE / c).read_text() for c in r["constraints"]},
                       "python": sys.version_info[:2]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: What building each venv costs on a fresh machine (2 cores at load 10-14; 2026-12-03): the
#: progress line's "~N min" and "~N GB" (measured by `python tests/drift/venvs.py --all`).
EXPECTED = {"sglang": {"minutes": 8, "gb": 1.5}, "vllm": {"minutes": 9, "gb": 3.1}}
#: How often a build in progress says so.
HEARTBEAT_S = 30.0


def _pip(py: Path, args: list[str], log, what: str = "") -> None:
    """Run pip, saying every HEARTBEAT_S what it is building and for how long (a fresh
    build downloads GBs: a silent stage looks hung)."""
    import tempfile
    import threading

    cmd = [str(py), "-m", "pip", "--disable-pip-version-check", *args]
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True)
        done = threading.Event()

        def beat():
            while not done.wait(HEARTBEAT_S):
                log(f"{what}: {(time.time() - t0) / 60:.0f} min so far")
        threading.Thread(target=beat, daemon=True).start()
        try:
            proc.wait()
        finally:
            done.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        sink.seek(0)
        out = sink.read()
    log(f"$ pip {' '.join(args[:6])}{' ...' if len(args) > 6 else ''} ({time.time() - t0:.0f} s)")
    if proc.returncode == 0:
        return
    last = out.strip().splitlines()[-1] if out.strip() else "pip failed"
    if any(marker in out for marker in _UNREACHABLE):
        raise RegistryUnreachable(last)
    reachable, why = index_reachable(py)
    if not reachable:
        raise RegistryUnreachable(f"{last} ({why})")
    raise BuildFailed(f"pip {' '.join(args)} failed:\n{out[-3000:]}")


_PROBE = """
import json, os, subprocess, sys, urllib.request
from pip._internal.models.index import PyPI
url = os.environ.get("PIP_INDEX_URL")
if not url:
    got = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True)
    url = got.stdout.strip() if got.returncode == 0 and got.stdout.strip() else PyPI.simple_url
try:
    urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=20).close()
    print(json.dumps([True, url]))
except urllib.error.HTTPError as e:   # it answered: reachable
    print(json.dumps([True, f"{url}: HTTP {e.code}"]))
except Exception as e:
    print(json.dumps([False, f"{url}: {type(e).__name__}: {e}"]))
"""


def index_reachable(py: Path) -> tuple[bool, str]:
    """(whether the index pip is configured for answers at all, what was tried)."""
    proc = subprocess.run([str(py), "-c", _PROBE], capture_output=True, text=True, timeout=60)
    try:
        ok, why = json.loads(proc.stdout.strip().splitlines()[-1])
        return bool(ok), why
    except (ValueError, IndexError):
        return True, "probe failed"   # cannot tell: do not hide a real failure behind a skip


def venv_dir(engine: str, version: str) -> Path:
    """Named by the recipe's hash too: checkouts with different recipes (a branch beside
    main) each keep their own venv instead of rebuilding one folder in turn."""
    return CACHE / f"{engine}-{version}-{_recipe_hash(engine, version)[:12]}"


def ensure_venv(engine: str, version: str, log=lambda msg: None) -> Path:
    """The venv's python for `engine`==`version`, built if missing or stale. One builder at a
    time (a lock file beside it): pytest-xdist workers and concurrent runs share the cache."""
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{engine}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_venv(engine, version, log)


def _ensure_venv(engine: str, version: str, log) -> Path:
    root = venv_dir(engine, version)
    py = root / "bin" / "python"
    stamp = root / ".complete"
    want = _recipe_hash(engine, version)
    if py.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return py
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    expect = EXPECTED[engine]
    what = f"building the {engine} {version} venv (~{expect['gb']} GB, ~{expect['minutes']} min)"
    log(f"{what} in {root}")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    recipe = RECIPES[engine]
    cons = [a for c in recipe["constraints"] for a in ("-c", str(HERE / c))]
    try:
        _pip(py, ["install", "-q", "--no-deps", f"{engine}=={version}"], log, what)
        _pip(py, ["install", "-q", *cons, *recipe["deps"]], log, what)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    stamp.write_text(want + "\n")
    log(f"built {root} in {time.time() - t0:.0f} s")
    return py


def site_packages(py: Path) -> Path:
    out = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def pinned() -> list[tuple[str, str]]:
    """(engine, release) of every engine whose facts the drift check holds against its
    released package: the adapters' pinned_version."""
    from specc.engines import get_engine

    return [(name, get_engine(name).pinned_version) for name in RECIPES]


def ensure_all(log=print) -> list[Path]:
    """Every pinned release's venv, built where missing, one after another."""
    out = []
    releases = pinned()
    for i, (engine, version) in enumerate(releases, 1):
        log(f"[{i}/{len(releases)}] {engine} {version}")
        out.append(ensure_venv(engine, version, log))
    return out


if __name__ == "__main__":   # python tests/drift/venvs.py [--all | sglang 0.5.23]
    def _say(msg: str) -> None:
        print(f"drift venvs: {msg}", flush=True)
    if sys.argv[1:] == ["--all"]:
        for path in ensure_all(_say):
            print(path)
    else:
        print(ensure_venv(sys.argv[1], sys.argv[2], log=_say))
