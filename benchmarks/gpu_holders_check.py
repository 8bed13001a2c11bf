"""Run on a GPU host: does specc's preflight see a process holding GPU memory?

    python3 benchmarks/gpu_holders_check.py

Starts a child that allocates ~2 GB on GPU 0 (torch, else a CUDA driver call
through ctypes), then asks specc.run.lifecycle.gpu_holders about GPU 0 and GPU 1.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HOLD = r'''
import ctypes, sys, time
try:
    import torch
    x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda:0")
except Exception:
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int(); ctx = ctypes.c_void_p(); ptr = ctypes.c_uint64()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 * 1024**3)) == 0
print("holding", flush=True)
time.sleep(60)
'''


class Ctx:
    """The slice of invoke.Context that gpu_holders uses (invoke may be absent here)."""

    def run(self, cmd, hide=True, warn=True):
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True)

        class R:
            ok = p.returncode == 0
            stdout = p.stdout
            exited = p.returncode
        return R()


def main() -> int:
    from specc.run.lifecycle import gpu_holders

    print("before:", gpu_holders(Ctx(), [0]))
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        print("child:", line, "pid", child.pid)
        time.sleep(1.0)
        print(subprocess.run("nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory "
                             "--format=csv,noheader", shell=True, capture_output=True,
                             text=True).stdout.strip())
        problems, note = gpu_holders(Ctx(), [0])
        print("GPU 0:", problems, note)
        print("GPU 1:", gpu_holders(Ctx(), [1]))
        ok = any(f"pid {child.pid}" in p for p in problems)
        print("DETECTED" if ok else "NOT DETECTED (pid namespaces may hide it)")
        return 0
    finally:
        child.kill()


if __name__ == "__main__":
    raise SystemExit(main())
