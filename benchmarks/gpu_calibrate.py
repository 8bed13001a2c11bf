"""Measure, on whatever GPU this runs on, what specc's performance model needs,
and write a calibration file (JSON) that ``specc.perf`` reads.

    python3 benchmarks/gpu_calibrate.py --out specc/perf/calibration/h200.json
    python3 benchmarks/gpu_calibrate.py --device cpu --quick --out /tmp/cpu.json   # smoke test
    python3 benchmarks/gpu_calibrate.py --derive-only specc/perf/calibration/h200.json  # refit
    python3 benchmarks/gpu_calibrate.py --scale-from specc/perf/calibration/h200.json \\
        --kind H100 --out specc/perf/calibration/h100.json     # datasheet-derived kind
    inv calibrate --out specc/perf/calibration/h200.json     # the same, as a task

Every timing is a CUDA-graph replay timed with CUDA events; each figure is the
median of ``--repeats`` replays (the spread is recorded too).  Sections, each
independent (a failure is recorded and the others still run; the JSON is
rewritten after every section so a killed run keeps what it measured):

* ``dense``: the weight GEMMs of a Llama-3.1-8B-shaped model (32 layers of
  qkv, o, gate_up, down, plus lm_head; bf16) vs tokens per step.
* ``moe``: one MoE layer at Kimi-K2.5 / DeepSeek-V3 expert shapes per TP-8
  shard (hidden 7168, moe_intermediate 2048 / 8 = 256, 384 routed experts, 8
  active per token with uniform routing, plus the shared expert and the router
  GEMM), as a grouped GEMM (``torch._grouped_mm``) over the experts touched;
  bf16.  Kimi-K2.5 ships INT4 experts, so the table records bytes/s achieved:
  the model uses bandwidth over bytes, not a dtype.
* ``attention``: decode attention (one query token per sequence) over a KV
  cache at several context lengths: Llama-3.1-8B GQA through SDPA, and a
  Kimi/DeepSeek MLA latent cache per TP-8 rank emulated with two matmuls.
* ``draft``: an EAGLE-3 draft's single decoder layer + lm_head (GEMMs) at
  Llama-3.1-8B (TP 1) and Kimi-K2.5 (TP-8 shard) shapes vs tokens.
* ``kernel_floor``: the latency of one tiny GEMM / elementwise kernel inside a
  CUDA graph (the per-kernel cost that per-layer fixed latency is made of).
* ``allreduce``: NCCL all-reduce latency and bandwidth, 16 KB .. 64 MB, where
  2+ GPUs exist (one process per GPU; NVLink multicast kept off).
* ``roofline``: a large bf16 GEMM and a device-to-device copy (the ceilings).

``derive`` turns the tables into the constants the model reads; each names
its source.  Pure Python over the JSON, so ``--derive-only`` refits without a GPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # a checkout's specc
from specc.perf.model import blend, interp_log  # noqa: E402  (one formula: the model's)

TOKENS = [1, 8, 64, 128, 256, 512, 1024]
DRAFT_TOKENS = [1, 2, 4, 8, 16, 32, 64]
CONTEXTS = [1024, 8192, 32768, 131072]
AR_SIZES = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]

LLAMA8B = dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128,
               vocab=128256, layers=32)
# Kimi-K2.5 text model = DeepSeek-V3 layout; per TP-8 shard.
KIMI = dict(hidden=7168, moe_intermediate=2048, experts=384, active=8, shared=1, layers=61,
            tp=8, heads=64, kv_lora_rank=512, rope_dim=64)
# EAGLE-3 drafts: one Llama decoder layer + lm_head over the draft vocabulary.
# Kimi draft's intermediate_size is not in specc's facts; 18432 (DeepSeek-V3's
# dense intermediate) is assumed.
DRAFTS = {
    "llama3.1-8b_tp1": dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128,
                            vocab=32000, tp=1),
    "kimi-k2.5_tp8": dict(hidden=7168, intermediate=18432, heads=64, kv_heads=8, head_dim=128,
                          vocab=32000, tp=8),
}
# Datasheet figures per GPU kind (dense bf16 tensor FLOP/s without sparsity, HBM B/s).
DATASHEET = {
    "H200": {"hbm_Bps": 4.8e12, "bf16_flops": 989e12, "nvlink_Bps": 900e9, "memory_gb": 141},
    "H100": {"hbm_Bps": 3.35e12, "bf16_flops": 989e12, "nvlink_Bps": 900e9, "memory_gb": 80},
    "A100": {"hbm_Bps": 2.04e12, "bf16_flops": 312e12, "nvlink_Bps": 600e9, "memory_gb": 80},
    "B200": {"hbm_Bps": 8.0e12, "bf16_flops": 2250e12, "nvlink_Bps": 1800e9, "memory_gb": 180},
}
BF16 = 2


def gpu_kind(name: str) -> str:
    for k in DATASHEET:
        if k in name.upper():
            return k
    return name.replace("NVIDIA ", "").split()[0] if name else "unknown"


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# --------------------------------------------------------------------------- timing
class Timer:
    """Time a closure: CUDA graph + events on a GPU, perf_counter on the CPU."""

    def __init__(self, torch, device: str, repeats: int):
        self.torch, self.device, self.repeats = torch, device, repeats
        self.cuda = device == "cuda"

    def __call__(self, fn, inner: int = 1) -> dict:
        torch = self.torch
        if not self.cuda:
            fn()
            ts = []
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                ts.append((time.perf_counter() - t0) / inner)
            return _stats(ts)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                fn()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(self.repeats):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3 / inner)
        del g
        torch.cuda.synchronize()
        return _stats(ts)


def _stats(ts: list[float]) -> dict:
    ts = sorted(ts)
    return {"median_s": statistics.median(ts), "min_s": ts[0], "max_s": ts[-1], "repeats": len(ts)}


def _free(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _w(torch, device, *shape):
    t = torch.empty(*shape, dtype=torch.bfloat16, device=device)
    t.normal_(0.0, 0.02)
    return t


# --------------------------------------------------------------------------- sections
def measure_roofline(torch, device, timer, quick):
    n = 1024 if quick else 8192
    a, b = _w(torch, device, n, n), _w(torch, device, n, n)
    r = timer(lambda: torch.mm(a, b), inner=1 if quick else 5)
    flops = 2.0 * n ** 3
    out = {"gemm": {"m": n, "n": n, "k": n, **r, "flops_per_s": flops / r["median_s"]}}
    a = b = None   # freed (not del: the closures above name them)
    nbytes = (64 << 20) if quick else (4 << 30)
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    r = timer(lambda: dst.copy_(src), inner=1 if quick else 5)
    out["copy"] = {"bytes": nbytes, **r, "read_write_Bps": 2.0 * nbytes / r["median_s"]}
    src = dst = None   # freed (not del: the closures above name them)
    _free(torch, device)
    return out


def _linear_set(shapes):
    return sum(o * i for o, i in shapes)


def measure_dense(torch, device, timer, quick):
    F = torch.nn.functional
    c = dict(LLAMA8B)
    if quick:
        c.update(hidden=256, intermediate=896, heads=2, kv_heads=1, head_dim=128, vocab=8000, layers=2)
    h, i = c["hidden"], c["intermediate"]
    qkv_out = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
    layer_shapes = [(qkv_out, h), (c["heads"] * c["head_dim"], h), (2 * i, h), (h, i)]
    layers = [[_w(torch, device, o, k) for o, k in layer_shapes] for _ in range(c["layers"])]
    lm = _w(torch, device, c["vocab"], h)
    params = c["layers"] * _linear_set(layer_shapes) + c["vocab"] * h
    maxn = max(TOKENS)
    xh, xi = _w(torch, device, maxn, h), _w(torch, device, maxn, i)
    rows = []
    for n in TOKENS:
        x, y = xh[:n], xi[:n]

        def step():
            for wqkv, wo, wgu, wd in layers:
                F.linear(x, wqkv)
                F.linear(x[:, : wo.shape[1]], wo)
                F.linear(x, wgu)
                F.linear(y, wd)
            F.linear(x, lm)

        r = timer(step)
        byts, flops = params * BF16, 2.0 * params * n
        rows.append({"tokens": n, **r, "weight_bytes": byts, "flops": flops,
                     "bytes_per_s": byts / r["median_s"], "flops_per_s": flops / r["median_s"]})
        log(f"dense n={n:5d}: {r['median_s'] * 1e3:8.3f} ms  {byts / r['median_s'] / 1e12:.2f} TB/s  "
            f"{flops / r['median_s'] / 1e12:.1f} TFLOP/s")
    layers = lm = xh = xi = None   # freed (not del: the closures above name them)
    _free(torch, device)
    return {"model": "Llama-3.1-8B-shaped weight GEMMs (32 layers qkv/o/gate_up/down + lm_head), bf16, TP 1",
            "shape": c, "params": params, "dtype": "bf16", "rows": rows}


def _routing(torch, n, E, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, E, generator=g).topk(k, dim=1).indices  # uniform, k distinct per token


def _grouped_mm_fn(torch):
    for name in ("grouped_mm",):
        f = getattr(torch.nn.functional, name, None)
        if f is not None:
            return f, f"torch.nn.functional.{name}"
    f = getattr(torch, "_grouped_mm", None)
    return (f, "torch._grouped_mm") if f is not None else (None, None)


def measure_moe(torch, device, timer, quick):
    F = torch.nn.functional
    c = dict(KIMI)
    H, I, E, k = c["hidden"], c["moe_intermediate"] // c["tp"], c["experts"], c["active"]  # noqa: E741  I: the intermediate size, the usual notation
    copies = 8
    if quick:
        H, E, copies = 512, 64, 2
    ALIGN = 8
    # weights: `copies` distinct layers so that consecutive layers never hit L2
    W1 = [_w(torch, device, E, 2 * I, H) for _ in range(copies)]   # gate_up, (E, N, K)
    W2 = [_w(torch, device, E, H, I) for _ in range(copies)]       # down
    WS1 = [_w(torch, device, 2 * I * c["shared"], H) for _ in range(copies)]
    WS2 = [_w(torch, device, H, I * c["shared"]) for _ in range(copies)]
    WG = [_w(torch, device, E, H) for _ in range(copies)]
    gmm, gmm_name = _grouped_mm_fn(torch)
    expert_params = 3 * H * I
    impl = None
    if gmm is not None:
        try:  # correctness check against a loop over experts, with empty groups
            a = _w(torch, device, 16, H)
            offs = torch.tensor([0, 8, 8, 16] + [16] * (E - 4), dtype=torch.int32, device=device)
            got = gmm(a, W1[0].transpose(-2, -1), offs=offs)
            ref = torch.cat([a[:8] @ W1[0][1].T, a[8:] @ W1[0][3].T])
            err = (got.float() - ref.float()).abs().max().item()
            if err < 1e-2 * max(1.0, ref.float().abs().max().item()):
                impl = gmm_name
            else:
                log(f"moe: {gmm_name} mismatch {err}; using a loop over experts")
        except Exception as e:  # noqa: BLE001 - any failure means: use the loop
            log(f"moe: {gmm_name} unusable here ({type(e).__name__}: {e}); using a loop over experts")
    impl = impl or "loop over touched experts (torch.mm each)"
    rows = []
    maxn = max(TOKENS)
    X = _w(torch, device, maxn + 1, H)
    for n in TOKENS:
        topi = _routing(torch, n, E, k, seed=n)
        flat = topi.reshape(-1)
        tok = torch.arange(n).repeat_interleave(k)
        order = torch.argsort(flat, stable=True)
        flat, tok = flat[order], tok[order]
        counts = torch.bincount(flat, minlength=E)
        touched = int((counts > 0).sum())
        padded = ((counts + ALIGN - 1) // ALIGN) * ALIGN
        gidx, pos = [], 0
        starts = torch.cumsum(counts, 0) - counts
        for e in range(E):
            ce, pe = int(counts[e]), int(padded[e])
            if pe:
                s = int(starts[e])
                gidx += tok[s:s + ce].tolist() + [n] * (pe - ce)  # row n of X_ext is zero
            pos += pe
        gidx_t = torch.tensor(gidx, dtype=torch.long, device=device)
        offs = torch.cumsum(padded, 0).to(torch.int32).to(device)
        xe = X[: n + 1].clone()
        xe[n].zero_()
        x = xe[:n]
        wts = torch.full((len(gidx), 1), 1.0 / k, dtype=torch.bfloat16, device=device)
        out = torch.zeros(n + 1, H, dtype=torch.bfloat16, device=device)
        touched_list = [e for e in range(E) if int(counts[e])]
        seg = [(int(s), int(s + p)) for s, p in zip((torch.cumsum(padded, 0) - padded).tolist(),
                                                      padded.tolist())]

        def layer(j):
            F.linear(x, WG[j])                                     # router GEMM
            xs = xe.index_select(0, gidx_t)
            if impl != gmm_name:
                h = torch.empty(xs.shape[0], 2 * I, dtype=xs.dtype, device=device)
                for e in touched_list:
                    a0, a1 = seg[e]
                    torch.mm(xs[a0:a1], W1[j][e].T, out=h[a0:a1])
            else:
                h = gmm(xs, W1[j].transpose(-2, -1), offs=offs)
            a = F.silu(h[:, :I]) * h[:, I:]
            if impl != gmm_name:
                o = torch.empty(xs.shape[0], H, dtype=xs.dtype, device=device)
                for e in touched_list:
                    a0, a1 = seg[e]
                    torch.mm(a[a0:a1], W2[j][e].T, out=o[a0:a1])
            else:
                o = gmm(a, W2[j].transpose(-2, -1), offs=offs)
            out.zero_()
            out.index_add_(0, gidx_t, o * wts)
            hs = F.linear(x, WS1[j])
            F.linear(F.silu(hs[:, :I]) * hs[:, I:], WS2[j])       # shared expert

        def step():
            for j in range(copies):
                layer(j)

        r = timer(step)
        t = r["median_s"] / copies
        routed_bytes = touched * expert_params * BF16
        other_bytes = (3 * H * I * c["shared"] + E * H) * BF16
        flops = 2.0 * n * (k * expert_params + 3 * H * I * c["shared"] + E * H)
        expected = E * (1.0 - (1.0 - k / E) ** n)
        rows.append({"tokens": n, "median_s": t, "min_s": r["min_s"] / copies,
                     "max_s": r["max_s"] / copies, "repeats": r["repeats"],
                     "experts_touched": touched, "experts_touched_expected": expected,
                     "rows_padded": len(gidx), "routed_bytes": routed_bytes,
                     "other_bytes": other_bytes, "bytes": routed_bytes + other_bytes,
                     "bytes_per_s": (routed_bytes + other_bytes) / t, "flops": flops,
                     "flops_per_s": flops / t})
        log(f"moe n={n:5d}: {t * 1e6:8.1f} us/layer  touched {touched:3d}  "
            f"{(routed_bytes + other_bytes) / t / 1e12:.2f} TB/s")
        gidx_t = offs = xe = out = wts = None   # freed (not del: the closures above name them)
    W1 = W2 = WS1 = WS2 = WG = X = None   # freed (not del: the closures above name them)
    _free(torch, device)
    return {"model": "one MoE layer at Kimi-K2.5/DeepSeek-V3 shapes per TP-8 shard: router GEMM, "
                     "gather, grouped gate_up GEMM, SiLU*mul, grouped down GEMM, weighted scatter-add, "
                     "shared expert; uniform routing; bf16 (the model uses bytes/s, not the dtype)",
            "shape": {"hidden": H, "moe_intermediate_per_shard": I, "experts": E, "active": k,
                      "shared": c["shared"], "tp": c["tp"], "layer_copies": copies,
                      "group_align_rows": ALIGN},
            "impl": impl, "dtype": "bf16", "expert_bytes": expert_params * BF16, "rows": rows}


def measure_attention(torch, device, timer, quick):
    F = torch.nn.functional
    out = {}
    c = LLAMA8B
    ctxs = [256, 1024] if quick else CONTEXTS
    L = 2 if quick else c["layers"]
    rows = []
    for b in (1, 8):
        for ctx in ctxs:
            kv_bytes = L * b * ctx * c["kv_heads"] * c["head_dim"] * 2 * BF16
            if kv_bytes > 40e9:
                continue
            K = [torch.empty(b, c["kv_heads"], ctx, c["head_dim"], dtype=torch.bfloat16,
                             device=device).normal_() for _ in range(L)]
            V = [torch.empty_like(K[0]).normal_() for _ in range(L)]
            q = torch.empty(b, c["heads"], 1, c["head_dim"], dtype=torch.bfloat16, device=device).normal_()

            def step():
                for j in range(L):
                    F.scaled_dot_product_attention(q, K[j], V[j], enable_gqa=True)

            r = timer(step)
            t = r["median_s"] / L
            rows.append({"batch": b, "context": ctx, "median_s": t, "min_s": r["min_s"] / L,
                         "max_s": r["max_s"] / L, "kv_bytes": kv_bytes / L,
                         "bytes_per_s": kv_bytes / L / t})
            log(f"attn gqa b={b} ctx={ctx:6d}: {t * 1e6:8.1f} us/layer {kv_bytes / L / t / 1e12:.2f} TB/s")
            K = V = q = None   # freed (not del: the closures above name them)
            _free(torch, device)
    out["gqa_llama8b"] = {"what": "SDPA decode, 1 query token per sequence, 32 q / 8 kv heads x 128, "
                                  "one layer (median over 32 distinct layer caches), bf16 KV",
                          "rows": rows}
    # MLA absorbed decode per TP-8 rank: 8 heads over a replicated latent cache (512 + 64).
    heads = KIMI["heads"] // KIMI["tp"]
    d, dv = KIMI["kv_lora_rank"] + KIMI["rope_dim"], KIMI["kv_lora_rank"]
    L = 2 if quick else 16
    rows = []
    for ctx in ctxs:
        C = [torch.empty(ctx, d, dtype=torch.bfloat16, device=device).normal_() for _ in range(L)]
        q = torch.empty(heads, d, dtype=torch.bfloat16, device=device).normal_()

        def step():
            for j in range(L):
                p = torch.softmax((q @ C[j].T).float() * d ** -0.5, dim=-1).to(torch.bfloat16)
                p @ C[j][:, :dv]

        r = timer(step)
        t = r["median_s"] / L
        byts = ctx * d * BF16
        rows.append({"batch": 1, "context": ctx, "median_s": t, "min_s": r["min_s"] / L,
                     "max_s": r["max_s"] / L, "kv_bytes": byts, "bytes_per_s": byts / t})
        log(f"attn mla ctx={ctx:6d}: {t * 1e6:8.1f} us/layer {byts / t / 1e12:.2f} TB/s (latent read once)")
        C = q = None   # freed (not del: the closures above name them)
        _free(torch, device)
    out["mla_kimi_tp8"] = {"what": "MLA absorbed decode emulated with two matmuls (not FlashMLA): 8 heads "
                                   "(64 / TP 8) over a 576-wide latent cache, 1 sequence; bytes count "
                                   "the latent once", "rows": rows}
    return out


def measure_draft(torch, device, timer, quick):
    F = torch.nn.functional
    out = {}
    for name, c in DRAFTS.items():
        c = dict(c)
        if quick:
            c.update(hidden=256, intermediate=512, heads=2, kv_heads=1, vocab=1000, tp=1)
        tp, h = c["tp"], c["hidden"]
        qkv_out = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"] // tp
        shapes = [(qkv_out, h), (h, c["heads"] * c["head_dim"] // tp),
                  (2 * c["intermediate"] // tp, h), (h, c["intermediate"] // tp),
                  (c["vocab"] // tp, h)]
        # 4 distinct copies so that replays do not run from L2
        copies = 4
        ws = [[_w(torch, device, o, i) for o, i in shapes] for _ in range(copies)]
        params = _linear_set(shapes)
        X = _w(torch, device, max(DRAFT_TOKENS), max(i for _, i in shapes))
        rows = []
        for n in DRAFT_TOKENS:
            def step():
                for w in ws:
                    for wi in w:
                        F.linear(X[:n, : wi.shape[1]], wi)

            r = timer(step, inner=1)
            t = r["median_s"] / copies
            rows.append({"tokens": n, "median_s": t, "min_s": r["min_s"] / copies,
                         "max_s": r["max_s"] / copies, "weight_bytes": params * BF16,
                         "flops": 2.0 * params * n, "bytes_per_s": params * BF16 / t})
            log(f"draft {name} n={n:3d}: {t * 1e6:8.1f} us  {params * BF16 / t / 1e12:.2f} TB/s")
        out[name] = {"shape": c, "params_per_gpu": params, "gemms": len(shapes), "rows": rows,
                     "what": "qkv, o, gate_up, down, lm_head(draft vocab) GEMMs per GPU, bf16"}
        ws = X = None   # freed (not del: the closures above name them)
        _free(torch, device)
    return out


def measure_kernel_floor(torch, device, timer, quick):
    F = torch.nn.functional
    n = 64 if quick else 256
    a = _w(torch, device, 1, 256)
    w = _w(torch, device, 256, 256)
    r = timer(lambda: [F.linear(a, w) for _ in range(n)])
    x = _w(torch, device, 1, 4096)
    r2 = timer(lambda: [x.mul_(1.0) for _ in range(n)])
    _free(torch, device)
    return {"gemm_s": r["median_s"] / n, "elementwise_s": r2["median_s"] / n, "kernels": n,
            "what": "one tiny GEMM (1x256x256) / elementwise kernel, back to back in one CUDA graph"}


def _fast_topk(torch, p, k):
    """SGLang 0.5.23's ``fast_topk`` (srt/utils/common.py): max for k = 1, else top-k."""
    return torch.max(p, dim=-1, keepdim=True) if k == 1 else torch.topk(p, k, dim=-1)


def measure_spec_step(torch, device, timer, quick):
    """The speculative step's own GPU work beyond its GEMMs, at Llama-3.1-8B + EAGLE-3
    shapes: what the performance model carries as per-pass, per-verify and per-tree-token
    overheads (specc.perf.model SPEC_*), measured so that its GPU share is known."""
    F = torch.nn.functional
    c = dict(DRAFTS["llama3.1-8b_tp1"])
    t_heads, t_kv, hd, t_vocab = LLAMA8B["heads"], LLAMA8B["kv_heads"], LLAMA8B["head_dim"], LLAMA8B["vocab"]
    if quick:
        c.update(hidden=256, intermediate=512, heads=2, kv_heads=1, vocab=1000)
        t_heads, t_kv, hd, t_vocab = 4, 1, 32, 2000
    h = c["hidden"]
    shapes = [((c["heads"] + 2 * c["kv_heads"]) * c["head_dim"], h), (h, c["heads"] * c["head_dim"]),
              (2 * c["intermediate"], h), (h, c["intermediate"]), (c["vocab"], h)]
    W = [_w(torch, device, o, i) for o, i in shapes]
    out: dict = {}
    batches = (1, 8)
    draft_ctx = 256 if quick else 1024

    # (a) a chain of draft passes in one CUDA graph: GEMMs + draft attention, with and
    # without what a pass adds (softmax over the draft vocabulary, top-k, for a tree the
    # top-k over topk^2 candidates and the gather of the chosen parents' hidden states).
    rows = []
    for b in batches:
        for topk in (1, 4, 8):
            n = b * topk
            X = _w(torch, device, n, h)
            K = _w(torch, device, n, c["kv_heads"], draft_ctx, c["head_dim"])
            V = _w(torch, device, n, c["kv_heads"], draft_ctx, c["head_dim"])
            q = _w(torch, device, n, c["heads"], 1, c["head_dim"])
            scores = torch.zeros(b, topk, device=device)

            def forward():
                y = F.linear(X, W[0])
                F.scaled_dot_product_attention(q, K, V, enable_gqa=True)
                y = F.linear(y[:, : W[1].shape[1]], W[1])
                g = F.linear(y, W[2])
                y = F.linear(g[:, : W[3].shape[1]], W[3])
                return F.linear(y, W[4])

            def with_select():
                logits = forward()
                p = torch.softmax(logits.float(), dim=-1)
                v, i = _fast_topk(torch, p, topk)
                if topk > 1:  # expand: parent score x child prob, keep the best topk per request
                    cand = (scores.unsqueeze(-1) + v.view(b, topk, topk).log()).view(b, -1)
                    best_v, best_i = torch.topk(cand, topk, dim=-1)
                    scores.copy_(best_v)
                    parents = (best_i // topk).view(-1) + torch.arange(b, device=device).repeat_interleave(topk) * topk
                    X.copy_(X.index_select(0, parents))
                    i.view(b, -1).gather(1, best_i)
                else:
                    X[:, :1].copy_(i.to(X.dtype))   # the chosen token feeds the next pass

            for steps in ((1, 3) if quick else (1, 3, 5, 8)):
                plain = timer(lambda: [forward() for _ in range(steps)])
                full = timer(lambda: [with_select() for _ in range(steps)])
                extra = (full["median_s"] - plain["median_s"]) / steps
                rows.append({"batch": b, "topk": topk, "steps": steps,
                             "gemm_attn_s": plain["median_s"], "pass_s": full["median_s"],
                             "select_per_pass_s": extra})
                log(f"draft chain b={b} topk={topk} steps={steps}: {full['median_s'] * 1e6:8.1f} us "
                    f"(select {extra * 1e6:6.1f} us/pass)")
            X = K = V = q = None   # freed (not del: the closures above name them)
            _free(torch, device)
    out["draft_chain"] = {"what": "N draft passes (EAGLE-3 Llama-3.1-8B draft: 1 layer + lm_head over "
                                  f"{c['vocab']} tokens, attention over {draft_ctx} draft KV) in one "
                                  "CUDA graph; select = softmax + top-k (+ tree expansion and gather)",
                          "rows": rows}

    # (b) top-k over the draft vocabulary; greedy sampling over the target's vocabulary.
    rows = []
    for nrows in (1, 8, 32, 64, 256):
        lg = torch.empty(nrows, c["vocab"], device=device).normal_()
        for k in (1, 4, 8):
            r = timer(lambda: _fast_topk(torch, torch.softmax(lg, dim=-1), k))
            rows.append({"rows": nrows, "k": k, "vocab": c["vocab"], "median_s": r["median_s"]})
        tl = torch.empty(nrows, t_vocab, dtype=torch.bfloat16, device=device).normal_()
        r = timer(lambda: torch.argmax(tl, dim=-1))
        rows.append({"rows": nrows, "k": 0, "vocab": t_vocab, "median_s": r["median_s"]})
        log(f"topk rows={nrows}: draft k=8 {rows[-2]['median_s'] * 1e6:6.1f} us, "
            f"target argmax {r['median_s'] * 1e6:6.1f} us")
        lg = tl = None   # freed (not del: the closures above name them)
    out["topk"] = {"what": "softmax + top-k over the draft vocabulary (k>0); argmax over the target's "
                           "vocabulary (k=0, greedy verify)", "rows": rows}

    # (c) verify attention: n draft tokens per request over ctx + n KV, with a tree mask
    # (a boolean mask: SDPA's masked kernel) against the same queries with no mask.
    rows = []
    for b in batches:
        for ctx in ((256,) if quick else (1024, 8192)):
            K = _w(torch, device, b, t_kv, ctx + 64, hd)
            V = _w(torch, device, b, t_kv, ctx + 64, hd)
            for n in (4, 8, 16, 64):
                qn = _w(torch, device, b, t_heads, n, hd)
                Kn, Vn = K[:, :, : ctx + n], V[:, :, : ctx + n]
                mask = torch.ones(b, 1, n, ctx + n, dtype=torch.bool, device=device)
                tri = torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))
                mask[:, :, :, ctx:] = tri   # a chain's mask; a tree's has the same shape and cost
                free = timer(lambda: F.scaled_dot_product_attention(qn, Kn, Vn, enable_gqa=True))
                masked = timer(lambda: F.scaled_dot_product_attention(qn, Kn, Vn, attn_mask=mask,
                                                                      enable_gqa=True))
                rows.append({"batch": b, "context": ctx, "draft_tokens": n,
                             "unmasked_s": free["median_s"], "masked_s": masked["median_s"]})
                log(f"verify attn b={b} ctx={ctx} n={n}: {free['median_s'] * 1e6:6.1f} -> "
                    f"{masked['median_s'] * 1e6:6.1f} us/layer with the tree mask")
            K = V = None   # freed (not del: the closures above name them)
            _free(torch, device)
    out["verify_attention"] = {"what": "one target layer's attention (Llama-3.1-8B GQA) for n draft "
                                       "tokens per request: no mask vs a boolean tree mask (SDPA)",
                               "rows": rows}
    W = None   # freed (not del: the closures above name them)
    _free(torch, device)
    return out


# --------------------------------------------------------------------------- all-reduce
def _ar_worker(rank, world, port, sizes, repeats, backend, q):
    import torch
    import torch.distributed as dist
    cuda = backend == "nccl"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    try:
        if cuda:
            torch.cuda.set_device(rank)
        kw = {"device_id": dev} if cuda else {}
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, **kw)
        inner = 20 if cuda else 2

        def timed(run):
            for _ in range(3):
                run()
            if cuda:
                torch.cuda.synchronize()
            ts = []
            for _ in range(repeats):
                dist.barrier()
                if cuda:
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    run()
                    b.record()
                    b.synchronize()
                    ts.append(a.elapsed_time(b) / 1e3 / inner)
                else:
                    t0 = time.perf_counter()
                    run()
                    ts.append((time.perf_counter() - t0) / inner)
            return _stats(ts)

        rows = []
        bufs = {}
        for size in sizes:  # eager first: always works
            t = bufs[size] = torch.ones(size // 2, dtype=torch.bfloat16, device=dev)

            def eager(t=t):
                for _ in range(inner):
                    dist.all_reduce(t)
            st = timed(eager)
            algbw = size / st["median_s"]
            rows.append({"bytes": size, "eager": st, "median_s": st["median_s"], "mode": "eager",
                         "algbw_Bps": algbw, "busbw_Bps": algbw * 2 * (world - 1) / world})
        graph_error = None
        if cuda:  # then inside CUDA graphs, as a server's decode step runs them
            for row in rows:
                t = bufs[row["bytes"]]
                try:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        dist.all_reduce(t)
                    torch.cuda.current_stream().wait_stream(s)
                    torch.cuda.synchronize()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        for _ in range(inner):
                            dist.all_reduce(t)
                    st = timed(g.replay)
                    del g
                except Exception as e:  # noqa: BLE001
                    graph_error = f"{type(e).__name__}: {e}"
                    break
                algbw = row["bytes"] / st["median_s"]
                row.update({"graph": st, "median_s": st["median_s"], "mode": "cuda-graph",
                            "algbw_Bps": algbw, "busbw_Bps": algbw * 2 * (world - 1) / world})
        if rank == 0:
            q.put({"world": world, "backend": backend, "rows": rows, "graph_error": graph_error})
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        if rank == 0:
            q.put({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})


def measure_allreduce(torch, device, repeats, quick):
    if device == "cuda" and torch.cuda.device_count() < 2:
        return {"skipped": f"needs 2+ GPUs; {torch.cuda.device_count()} here"}
    if device != "cuda" and not quick:
        return {"skipped": "no GPUs"}
    import socket

    import torch.multiprocessing as mp
    os.environ["NCCL_NVLS_ENABLE"] = "0"          # never NVLink multicast (shared hosts)
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
    world = min(torch.cuda.device_count(), 8) if device == "cuda" else 2
    backend = "nccl" if device == "cuda" else "gloo"   # gloo: CPU smoke test of the logic only
    sizes = AR_SIZES if not quick else AR_SIZES[:3]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_ar_worker, args=(r, world, port, sizes, repeats, backend, q))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        res = q.get(timeout=240)
    except Exception as e:  # noqa: BLE001
        res = {"error": f"no result: {type(e).__name__} {e}"}
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    for r in res.get("rows", []):
        log(f"allreduce world={world} {r['bytes'] / 1024:8.0f} KiB: eager {r['eager']['median_s'] * 1e6:8.1f} us"
            f"  {r['mode']} {r['median_s'] * 1e6:8.1f} us  busbw {r['busbw_Bps'] / 1e9:.1f} GB/s")
    if res.get("graph_error"):
        log(f"allreduce in CUDA graphs failed: {res['graph_error']}")
    if res.get("error"):
        log(f"allreduce failed: {res['error']}\n{res.get('trace', '')}")
    res["what"] = (f"torch.distributed all_reduce ({backend}, sum, bf16), one process per device, "
                   "NCCL_NVLS_ENABLE=0; median_s: in a CUDA graph where that worked, else eager")
    return res


# --------------------------------------------------------------------------- derive
def _lsq(xs, ys):
    """Least squares y = a + b x -> (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def _wlsq(rows, ys, ws):
    """Weighted least squares ys ~ rows @ c (normal equations, Gauss-Jordan) -> c."""
    k = len(rows[0])
    A = [[sum(w * r[i] * r[j] for r, w in zip(rows, ws)) for j in range(k)] for i in range(k)]
    b = [sum(w * r[i] * y for r, y, w in zip(rows, ys, ws)) for i in range(k)]
    for i in range(k):
        piv = max(range(i, k), key=lambda r: abs(A[r][i]))
        A[i], A[piv], b[i], b[piv] = A[piv], A[i], b[piv], b[i]
        for r in range(k):
            if r != i and A[i][i]:
                f = A[r][i] / A[i][i]
                A[r] = [x - f * y for x, y in zip(A[r], A[i])]
                b[r] -= f * b[i]
    return [b[i] / A[i][i] if A[i][i] else 0.0 for i in range(k)]


BLEND_PS = [1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0]


def fit_stream(points):
    """[(weight_bytes, gemm_launches, seconds)] of memory-bound steps (few tokens) ->
    (bandwidth B/s, seconds per GEMM launch): t = bytes / bw + launches * c, least
    squares on the relative error.  Many small GEMMs (a TP-8 draft) reach less of the
    bandwidth than a few large ones: each GEMV ramps up and drains."""
    inv_bw, c = _wlsq([[b, g] for b, g, _ in points], [t for _, _, t in points],
                      [1.0 / t ** 2 for _, _, t in points])
    return 1.0 / inv_bw, max(c, 0.0)


def stream_points(m):
    pts = []
    dense = (m.get("dense") or {}).get("rows") or []
    if dense:
        shape = m["dense"]["shape"]
        r = min(dense, key=lambda r: r["tokens"])
        pts.append((r["weight_bytes"], 4 * shape["layers"] + 1, r["median_s"]))
    for d in (m.get("draft") or {}).values():
        for r in d["rows"]:
            if r["tokens"] <= 8:
                pts.append((r["weight_bytes"], d["gemms"], r["median_s"]))
    return pts


def fit_dense(rows, launches, bw, c, ceiling=None):
    """Dense GEMM table -> (p, [[rows, FLOP/s]], max error).  Memory term: weight bytes
    / bw + launches * c.  Compute term: FLOPs / F(rows), with F solved at the
    compute-bound rows (>= 1.25 x the 1-token time) through the blend of exponent p,
    held flat below; p is the one with the smallest worst error among those whose F
    stays physical (not above ``ceiling``, the large square GEMM's rate)."""
    rows = sorted(rows, key=lambda r: r["tokens"])
    best = None
    for p in BLEND_PS:
        table = []
        for r in rows:
            mem, t = r["weight_bytes"] / bw + launches * c, r["median_s"]
            if t >= 1.25 * rows[0]["median_s"] and t > mem:
                comp = (t ** p - mem ** p) ** (1.0 / p)
                table.append([r["tokens"], r["flops"] / comp])
        if not table or (ceiling and max(f for _, f in table) > 1.02 * ceiling):
            continue
        err = max(abs(blend(r["weight_bytes"] / bw + launches * c,
                            r["flops"] / interp_log(table, r["tokens"]), p) / r["median_s"] - 1.0)
                  for r in rows)
        if best is None or err < best[2]:
            best = (p, table, err)
    if best is None and ceiling is not None:   # no physical p: the best fit regardless
        best = fit_dense(rows, launches, bw, c, None)
    return best


def fit_moe(rows, bw, c_launch, p, table):
    """MoE layer table -> (c, bw, flops, max error) of
    t = dense part (shared expert + router: 3 GEMMs, as the dense fit) + c
        + routed_bytes / bw_moe + routed_flops / flops_moe,
    least squares on the relative error."""
    X, ys, ws = [], [], []
    for r in rows:
        other_flops = r["flops"] * r["other_bytes"] / (r["other_bytes"] + r["expert_flop_bytes"])
        dense = blend(r["other_bytes"] / bw + 3 * c_launch,
                      other_flops / interp_log(table, r["tokens"]), p)
        X.append([1.0, r["routed_bytes"], r["flops"] - other_flops])
        ys.append(r["median_s"] - dense)
        ws.append(1.0 / r["median_s"] ** 2)
    c, inv_bw, inv_fl = _wlsq(X, ys, ws)
    err = max(abs((x[0] * c + x[1] * inv_bw + x[2] * inv_fl + (r["median_s"] - y)) / r["median_s"] - 1)
              for x, y, r in zip(X, ys, rows))
    return c, 1.0 / inv_bw, 1.0 / inv_fl if inv_fl > 0 else float("inf"), err


def derive(cal: dict) -> dict:
    """Tables -> the constants specc.perf.model reads.  Each: value, unit, source."""
    m = cal.get("measurements", {})
    src = f"measured on {cal.get('gpu_kind', '?')} {cal.get('date', '?')}"
    kind = cal.get("gpu_kind", "")
    ds = DATASHEET.get(kind, {})
    out: dict = {}

    def put(key, value, unit, source, note=None):
        out[key] = {"value": value, "unit": unit, "source": source}
        if note:
            out[key]["note"] = note

    if ds:
        put("hbm_peak_Bps", ds["hbm_Bps"], "B/s", "datasheet")
        put("bf16_peak_flops", ds["bf16_flops"], "FLOP/s", "datasheet")
    dense = (m.get("dense") or {}).get("rows") or []
    pts = stream_points(m)
    ceiling = ((m.get("roofline") or {}).get("gemm") or {}).get("flops_per_s")
    dense_fit = None
    if len(pts) >= 2 and dense:
        bw, c = fit_stream(pts)
        launches = 4 * m["dense"]["shape"]["layers"] + 1
        dense_fit = fit_dense(dense, launches, bw, c, ceiling)
    if dense_fit:
        p, table, err = dense_fit
        put("hbm_bw_dense_Bps", bw, "B/s", src,
            "weight streaming: t = bytes / this + GEMMs * gemm_launch_s, fit to the 1-token dense "
            "step and the drafts' steps at <= 8 tokens")
        put("gemm_launch_s", c, "s", src, "per weight GEMM in a memory-bound step (ramp-up and drain)")
        put("gemm_blend_p", p, "", src,
            "step = (mem^p + compute^p)^(1/p): how sharply memory- and compute-bound meet "
            f"(fit to the dense table; worst error {err * 100:.1f} %)")
        put("gemm_flops_by_rows", table, "[[rows, FLOP/s], ...]", src,
            "dense bf16 GEMM FLOP/s vs rows (tokens) per GEMM where compute-bound, through the "
            "blend; log-interpolated, flat outside")
    moe = (m.get("moe") or {}).get("rows") or []
    if moe and dense_fit:
        eb = m["moe"]["expert_bytes"]
        shp = m["moe"]["shape"]
        for r in moe:  # FLOPs per token of the routed experts vs the rest, by parameter count
            r["expert_flop_bytes"] = shp["active"] * eb
        c_moe, bw_m, fl_m, err = fit_moe(moe, bw, c, p, table)
        for r in moe:
            del r["expert_flop_bytes"]
        put("moe_layer_fixed_s", c_moe, "s", src,
            "per MoE layer: router, gather, activation, scatter, the grouped GEMMs' launches")
        put("hbm_bw_moe_Bps", bw_m, "B/s", src,
            "weight streaming over the experts touched by the step (grouped GEMM; bytes, any dtype)")
        put("moe_flops", fl_m, "FLOP/s", src,
            "routed-expert FLOP/s at a few rows per expert (additive to the streaming: the "
            f"grouped GEMM does not overlap them); fit worst error {err * 100:.1f} %")
    kf = m.get("kernel_floor") or {}
    if kf.get("gemm_s"):
        put("kernel_floor_s", kf["gemm_s"], "s", src, "one tiny GEMM in a CUDA graph")
        put("elementwise_kernel_s", kf["elementwise_s"], "s", src,
            "one small elementwise kernel in a CUDA graph (norms, rope, activations, residuals)")
    att = (m.get("attention") or {}).get("gqa_llama8b", {}).get("rows") or []
    if att:
        a, b = _wlsq([[1.0, r["kv_bytes"]] for r in att], [r["median_s"] for r in att],
                     [1.0 / r["median_s"] ** 2 for r in att])
        put("attn_kv_bw_Bps", 1.0 / b, "B/s", src,
            "decode attention: KV-cache bytes read per second (flash SDPA, GQA; slope)")
        put("attn_layer_fixed_s", max(a, 0.0), "s", src, "decode attention per layer at an empty cache")
    mla = (m.get("attention") or {}).get("mla_kimi_tp8", {}).get("rows") or []
    if mla:
        put("attn_mla_emulated_Bps", max(r["bytes_per_s"] for r in mla), "B/s", src,
            "MLA latent read through a two-matmul emulation (not FlashMLA): a lower bound, "
            "not used by the model")
    spec = m.get("spec_step") or {}
    src = f"measured on {kind or '?'} {cal.get('section_dates', {}).get('spec_step', cal.get('date', '?'))}"
    chain = (spec.get("draft_chain") or {}).get("rows") or []
    if chain:
        def sel(topk):
            xs = [r["select_per_pass_s"] for r in chain if r["batch"] == 1 and r["topk"] == topk]
            return statistics.median(xs) if xs else None
        for topk in (1, 8):
            if sel(topk) is not None:
                put(f"spec_select_per_pass_topk{topk}_s", max(sel(topk), 0.0), "s", src,
                    "GPU time a draft pass adds to its GEMMs and attention at batch 1: softmax + "
                    "top-k over the draft vocabulary" + (", tree expansion and gather" if topk > 1 else "")
                    + "; compare with SPEC_DRAFT_PASS_S, whose rest is CPU time between passes")
    topk_rows = (spec.get("topk") or {}).get("rows") or []
    am = [r for r in topk_rows if r["k"] == 0 and r["rows"] <= 8]
    if am:
        put("spec_verify_argmax_s", max(r["median_s"] for r in am), "s", src,
            "greedy sampling of the target's logits for <= 8 verified tokens; part of "
            "SPEC_VERIFY_FIXED_S")
    va = sorted((r for r in (spec.get("verify_attention") or {}).get("rows") or []
                 if r["batch"] == 1 and r["context"] == 1024), key=lambda r: r["draft_tokens"])
    if len(va) >= 2:
        lo, hi = va[0], va[-1]
        put("spec_tree_mask_attn_layer_s", max(lo["masked_s"] - lo["unmasked_s"], 0.0), "s", src,
            f"per target layer at batch 1, context 1024, {lo['draft_tokens']} draft tokens: what a "
            "boolean tree mask costs over unmasked attention (mostly fixed: the masked kernel)")
        put("spec_tree_mask_attn_per_token_s",
            max(((hi["masked_s"] - hi["unmasked_s"]) - (lo["masked_s"] - lo["unmasked_s"]))
                / (hi["draft_tokens"] - lo["draft_tokens"]), 0.0), "s", src,
            "per target layer and extra draft token, same setting: the mask's cost growth with the tree")
    ar = (m.get("allreduce") or {}).get("rows") or []
    if ar:
        world = m["allreduce"].get("world", 2)
        put(f"allreduce_latency_tp{world}_s", ar[0]["median_s"], "s", src,
            f"all-reduce of {ar[0]['bytes'] // 1024} KB on {world} GPUs ({ar[0]['mode']})")
        put(f"allreduce_busbw_tp{world}_Bps", max(r["busbw_Bps"] for r in ar), "B/s", src,
            "all-reduce bus bandwidth, largest message")
    return out


def scale_to(cal: dict, kind: str) -> dict:
    """A calibration for another GPU kind from this one, by datasheet ratios: memory
    bandwidths scale with HBM peak, FLOP/s with bf16 peak, latencies unchanged."""
    src_kind = cal["gpu_kind"]
    a, b = DATASHEET[src_kind], DATASHEET[kind]
    mem, fl = b["hbm_Bps"] / a["hbm_Bps"], b["bf16_flops"] / a["bf16_flops"]
    why = (f"derived from the {src_kind} measurement of {cal['date']} by datasheet ratios "
           f"(HBM {b['hbm_Bps'] / 1e12:g} vs {a['hbm_Bps'] / 1e12:g} TB/s, bf16 "
           f"{b['bf16_flops'] / 1e12:g} vs {a['bf16_flops'] / 1e12:g} TFLOP/s) until measured")
    out = {"version": cal["version"], "gpu_kind": kind, "gpu_name": None, "date": None,
           "derived_from": {"gpu_kind": src_kind, "date": cal["date"], "file": f"{src_kind.lower()}.json"},
           "note": why + "; latencies (kernels, all-reduce, the calibrated TP-8 term) unchanged",
           "measurements": {}, "constants": {}}
    for key, c in cal["constants"].items():
        c = dict(c)
        src_date = str(c.get("source", "")).rsplit(" ", 1)[-1] if str(
            c.get("source", "")).startswith("measured on ") else cal["date"]
        meas = f"{src_kind} measurement of {src_date}"
        calibrated = str(c.get("source", "")).startswith("calibrated")
        if key in ("hbm_peak_Bps", "bf16_peak_flops"):
            c["value"] = b["hbm_Bps"] if key == "hbm_peak_Bps" else b["bf16_flops"]
        elif key.endswith("_Bps") and key.startswith(("hbm_bw", "attn")):
            c["value"] = c["value"] * mem
            c["source"] = (f"derived: {meas} x {b['hbm_Bps'] / 1e12:g}/{a['hbm_Bps'] / 1e12:g} "
                           "(datasheet HBM ratio), until measured")
        elif key in ("moe_flops", "gemm_flops_by_rows"):
            c["value"] = ([[n, f * fl] for n, f in c["value"]] if key == "gemm_flops_by_rows"
                          else c["value"] * fl)
            c["source"] = (f"derived: {meas} x {b['bf16_flops'] / 1e12:g}/{a['bf16_flops'] / 1e12:g} "
                           "(datasheet bf16 ratio), until measured")
        elif not calibrated:
            c["source"] = (f"derived: {meas}, unchanged (a latency, a shape or NVLink: the same "
                           "on both by datasheet), until measured")
        out["constants"][key] = c
    return out


# --------------------------------------------------------------------------- main
def _write(path, cal):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cal, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="calibration JSON to write")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes (smoke test of the logic)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--only", default="", help="comma-separated sections")
    p.add_argument("--derive-only", metavar="JSON", help="recompute `constants` of a calibration file")
    p.add_argument("--scale-from", metavar="JSON", help="derive --kind from a measured file")
    p.add_argument("--kind", help="GPU kind for --scale-from (H100, A100, B200)")
    args = p.parse_args(argv)

    if args.derive_only:
        with open(args.derive_only) as f:
            cal = json.load(f)
        old = cal.get("constants", {})
        new = derive(cal)
        for k, v in old.items():  # keep constants set by hand/calibration elsewhere
            if k not in new and str(v.get("source", "")).startswith("calibrated"):
                new[k] = v
        if "allreduce_latency_tp8_s" not in new:  # measured on an 8-GPU node: keep it
            try:  # the constant no 1-2 GPU machine measures: solved by specc's own model
                from specc.perf.model import calibrate_tp8
                new.update(calibrate_tp8({**cal, "constants": new}))
            except ImportError:
                log("specc is not importable here: allreduce_latency_tp8_s not calibrated")
        cal["constants"] = new
        _write(args.out or args.derive_only, cal)
        print(json.dumps(new, indent=1))
        return 0
    if args.scale_from:
        with open(args.scale_from) as f:
            cal = json.load(f)
        _write(args.out, scale_to(cal, args.kind))
        return 0
    if not args.out:
        p.error("--out is required")

    import torch
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device; use --device cpu --quick for a smoke test")
    repeats = args.repeats or (3 if args.quick else 20)
    name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    cal = {"version": 1, "gpu_kind": gpu_kind(name) if device == "cuda" else "cpu",
           "gpu_name": name, "gpu_count": torch.cuda.device_count() if device == "cuda" else 0,
           "date": _dt.date.today().isoformat(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "driver": None, "python": platform.python_version(), "quick": args.quick,
           "repeats": repeats, "method": "CUDA graph replay, CUDA events, median of repeats",
           "measurements": {}, "errors": {}, "constants": {}}
    try:
        import subprocess
        cal["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=20).stdout.split("\n")[0] or None
    except Exception:  # noqa: BLE001
        pass
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    timer = Timer(torch, device, repeats)
    sections = {
        "roofline": lambda: measure_roofline(torch, device, timer, args.quick),
        "kernel_floor": lambda: measure_kernel_floor(torch, device, timer, args.quick),
        "dense": lambda: measure_dense(torch, device, timer, args.quick),
        "moe": lambda: measure_moe(torch, device, timer, args.quick),
        "draft": lambda: measure_draft(torch, device, timer, args.quick),
        "attention": lambda: measure_attention(torch, device, timer, args.quick),
        "spec_step": lambda: measure_spec_step(torch, device, timer, args.quick),
        "allreduce": lambda: measure_allreduce(torch, device, repeats, args.quick),
    }
    only = [s for s in args.only.split(",") if s]
    for sec, fn in sections.items():
        if only and sec not in only:
            continue
        log(f"== {sec}")
        t0 = time.time()
        try:
            cal["measurements"][sec] = fn()
            cal.setdefault("section_dates", {})[sec] = cal["date"]
        except Exception as e:  # noqa: BLE001 - record, go on with the next section
            cal["errors"][sec] = f"{type(e).__name__}: {e}"
            log(f"{sec} FAILED: {traceback.format_exc()}")
            _free(torch, device)
        log(f"== {sec} done in {time.time() - t0:.1f} s")
        cal["constants"] = derive(cal)
        _write(args.out, cal)
    print(json.dumps(cal["constants"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
