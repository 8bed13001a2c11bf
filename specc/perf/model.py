"""The performance model of the simulator and of the compiler's wall-time estimate:
pure functions, no I/O beyond the packaged calibration files, no heavy imports.

Hardware constants come from a calibration file per GPU kind
(``specc/perf/calibration/<kind>.json``, read by :mod:`specc.perf.hardware`):
``h200.json`` was measured on a real H200 by ``benchmarks/gpu_calibrate.py``,
``h100.json`` is derived from it by datasheet ratios until measured.  Each
constant there names its source.  One constant is *calibrated* instead of
measured: the per-layer latency of an all-reduce at TP 8 (a one- or two-GPU
machine cannot show it), solved so that the scenario's figure comes out
(Kimi-K2.5, TP 8, H200, about 82 output tokens/s per stream at concurrency 1
without speculation: the incident's baseline, docs/performance-model.md).  Numbers in this
file marked *estimate* are engineering estimates that no measurement backs.

Model of one scheduler step (SGLang runs one forward pass per step for the
whole running batch, in CUDA graphs) over ``n`` tokens (batch size ``b`` for
plain decode, ``b * num_draft_tokens`` for a speculative verify pass) of ``s``
sequences (``b``):

    t(n) = t_dense(n) + t_experts(n) + fixed + s * t_attn(context) + n * per_token

* ``t_dense``: the dense weight GEMMs as a smooth roofline,
  ``(mem^p + compute^p)^(1/p)`` with ``mem = bytes / hbm_bw_dense +
  GEMMs * gemm_launch_s`` and ``compute = 2 * params * n / F(n)``; ``F(n)`` is
  the measured GEMM FLOP/s at ``n`` rows (log-interpolated) and ``p`` the
  measured sharpness of the knee.
* ``t_experts`` (MoE only): ``moe_layers * moe_layer_fixed_s + touched bytes /
  hbm_bw_moe + expert FLOPs / moe_flops``.  Only the experts hit by at least
  one of the ``n`` tokens are read: with ``E`` routed experts and ``k`` active
  per token (uniform routing) the expected touched fraction is ``1 - (1 -
  k/E)^n``.  This is why MoE decode is memory-bound yet gets slower as the
  batch grows, and the main reason speculation's speedup shrinks with
  concurrency on Kimi-class models.  Bandwidth, not dtype: INT4 experts are
  fewer bytes at the measured bytes/s.
* ``fixed``: per layer, decode attention's empty-cache latency, a chain of
  small elementwise kernels (norms, rope, KV store, activation, residual) and
  two all-reduces at the server's TP (TP 2 measured; TP 8 calibrated, see
  above; TP 4 interpolated).
* ``t_attn``: KV-cache bytes per sequence at its context / the measured
  decode-attention bandwidth (MLA: one replicated latent per rank; GQA: KV heads
  split over TP).
* ``per_token``: all-reduce volume (two per layer of ``hidden`` bf16 values) at
  the measured bus bandwidth.

Speculation (EAGLE/EAGLE3 chain or tree):

    t_spec(b) = (num_steps + 1) * t_draft(b * topk) + t(b * num_draft_tokens) + overhead

``overhead`` (``spec_overhead_s``): a fixed cost per draft pass, per verify step
(sampling, accept, KV bookkeeping, scheduling) and, for trees, per verified draft
token (top-k, tree and mask building), calibrated on published SGLang figures.

``num_steps`` draft forward passes plus one draft "extend" pass over the
accepted tokens, then one target verify pass over ``num_draft_tokens`` tokens
per request.  Accepted tokens per step (including the bonus token) for a chain
(topk = 1) with per-position acceptance probability ``a`` and ``k`` steps:

    E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)

Tree (topk > 1) approximation, documented as such: the verified tree holds
``num_draft_tokens - 1`` drafted tokens, so it is at most
``depth = min(num_steps, num_draft_tokens - 1)`` deep and carries on average
``c = min(topk, (num_draft_tokens - 1) / depth)`` candidates per level; a
position is accepted if any of them matches, ``a_eff = 1 - (1 - a)^c``
(independent candidates).  ``E`` is the chain formula with ``a_eff`` and
``depth``: a topk-4 tree pruned to 4 tokens is little better than a chain.  It grows with topk and num_draft_tokens
and never exceeds ``num_steps + 1``.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .hardware import Calibration, calibration

#: Small elementwise kernels per decoder layer outside GEMMs and attention: two
#: RMSNorms, rope, KV-cache store, activation, residual add.  *Estimate* (a count
#: of SGLang's decode kernels; each costs the measured ``elementwise_kernel_s``).
ELEMENTWISE_KERNELS_PER_LAYER = 6
#: Weight GEMMs per decoder layer (qkv, o, gate_up, down) for the launch term.
GEMMS_PER_LAYER = 4
#: The scenario's figure (Kimi-K2.5, TP 8, H200, concurrency 1, no speculation).
KIMI_BASELINE_TOK_S = 82.0
KIMI_STEP_S = 1.0 / KIMI_BASELINE_TOK_S
KIMI_TP = 8
#: Context (KV tokens per sequence) when the caller gives none: the benchmark
#: defaults' mean decode context (input 1024 + half of output 256).
REF_CONTEXT = 1152
#: NGRAM drafting: CPU-side, no draft model. *Estimate*: 50 us per step + 40 us
#: per drafted token.
NGRAM_FIXED_S = 50e-6
NGRAM_PER_TOKEN_S = 40e-6

#: Bytes per parameter by quantization (weights only).  INT4 with group scales
#: ~0.55 B (Kimi-K2.5: ~554 GB for ~1.0T params); FP8 1 B; BF16/FP16 2 B.
BYTES_PER_PARAM = {"int4": 0.554, "awq": 0.554, "gptq": 0.554, "compressed-tensors": 0.554,
                   "w4afp8": 0.554, "fp8": 1.0, "modelopt_fp8": 1.0, "bf16": 2.0}


def blend(mem_s: float, compute_s: float, p: float) -> float:
    """Smooth roofline ``(mem^p + compute^p)^(1/p)``; p -> inf is ``max``."""
    if mem_s <= 0 or compute_s <= 0:
        return max(mem_s, compute_s, 0.0)
    hi = max(mem_s, compute_s)
    return hi * ((mem_s / hi) ** p + (compute_s / hi) ** p) ** (1.0 / p)


def interp_log(table, x: float) -> float:
    """Piecewise-linear in log(x) through ``[[x, y], ...]`` (x ascending); flat outside."""
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if x <= x1:
            return y0 + math.log(x / x0) / math.log(x1 / x0) * (y1 - y0)
    return table[-1][1]


def allreduce_latency_s(hw: Calibration, tp: int) -> float:
    """One small all-reduce at TP ``tp``: 0 at TP 1, the file's value where it has
    one (TP 2 measured, TP 8 calibrated), else log2-interpolated between known TPs."""
    if tp <= 1:
        return 0.0
    v = hw.allreduce_latency_s(tp)
    if v is not None:
        return v
    known = sorted((t, lat) for t in (2, 4, 8, 16)
                   if (lat := hw.allreduce_latency_s(t)) is not None)
    if not known:
        return 0.0
    pts = [[1, 0.0]] + [[t, v] for t, v in known]
    if tp >= pts[-1][0]:
        (t0, v0), (t1, v1) = pts[-2], pts[-1]
    else:
        (t0, v0), (t1, v1) = next((a, b) for a, b in zip(pts, pts[1:]) if a[0] <= tp <= b[0])
    return max(0.0, v0 + (v1 - v0) * math.log2(tp / t0) / math.log2(t1 / t0))


def layer_fixed_s(hw: Calibration, tp: int) -> float:
    """Per-layer latency that does not depend on the batch (see module doc)."""
    return (hw.attn_layer_fixed_s + ELEMENTWISE_KERNELS_PER_LAYER * hw.elementwise_kernel_s
            + 2 * allreduce_latency_s(hw, tp))


@dataclass(frozen=True)
class ModelCost:
    """What the step-time model needs to know about one model on one TP group."""

    tp: int
    num_layers: int
    dense_bytes_per_gpu: float     # weights read every step regardless of n
    expert_bytes_per_gpu: float    # all routed experts (0 for dense models)
    experts_total: int             # E (0 for dense)
    experts_active: int            # k
    flops_per_token_per_gpu: float  # all GEMMs, routed experts included
    fixed_s: float
    #: Per-token cost outside the weight GEMMs and attention (all-reduce volume).
    per_token_s: float = 0.0
    #: Part of ``flops_per_token_per_gpu`` in the routed experts (at the MoE rate).
    expert_flops_per_token_per_gpu: float = 0.0
    #: Layers with an MoE block (each pays ``moe_layer_fixed_s``).
    moe_layers: int = 0
    #: Dense weight GEMMs per step (each pays ``gemm_launch_s`` in the memory term).
    gemm_launches: int = 0
    #: KV-cache bytes per GPU per context token (all layers) read by decode attention.
    kv_bytes_per_ctx_token: float = 0.0
    hw: Calibration = field(default_factory=calibration, repr=False)

    # -- the step model ------------------------------------------------------
    def touched_fraction(self, n: int) -> float:
        if not self.experts_total:
            return 0.0
        return 1.0 - (1.0 - self.experts_active / self.experts_total) ** max(n, 1)

    def dense_mem_s(self) -> float:
        return self.dense_bytes_per_gpu / self.hw.bw_dense + self.gemm_launches * self.hw.gemm_launch_s

    def dense_compute_s(self, n: int) -> float:
        dense_flops = self.flops_per_token_per_gpu - self.expert_flops_per_token_per_gpu
        return n * dense_flops / interp_log(self.hw.gemm_flops_table, n)

    def mem_s(self, n: int) -> float:
        """Weight streaming: dense weights + the experts touched by n tokens."""
        return (self.dense_mem_s()
                + self.expert_bytes_per_gpu * self.touched_fraction(n) / self.hw.bw_moe)

    def compute_s(self, n: int) -> float:
        return (self.dense_compute_s(n)
                + n * self.expert_flops_per_token_per_gpu / self.hw.moe_flops)

    def dense_s(self, n: int) -> float:
        n = max(int(n), 1)
        return blend(self.dense_mem_s(), self.dense_compute_s(n), self.hw.blend_p)

    def experts_s(self, n: int) -> float:
        if not self.experts_total:
            return 0.0
        n = max(int(n), 1)
        return (self.moe_layers * self.hw.moe_layer_fixed_s
                + self.expert_bytes_per_gpu * self.touched_fraction(n) / self.hw.bw_moe
                + n * self.expert_flops_per_token_per_gpu / self.hw.moe_flops)

    def gemm_s(self, n: int) -> float:
        """The weight GEMMs (and MoE blocks) of one step: what the calibration tables measure.
        Remembered per n (a compile's estimate asks for the same few thousand times)."""
        memo = self.__dict__.setdefault("_gemm_s", {})   # a pure function of n: not a field
        got = memo.get(n)
        if got is None:
            got = memo[n] = self.dense_s(n) + self.experts_s(n)
        return got

    def attn_s(self, seqs: int, context: float | None = None) -> float:
        ctx = REF_CONTEXT if context is None else max(float(context), 0.0)
        return seqs * self.kv_bytes_per_ctx_token * ctx / self.hw.attn_bw

    def step_s(self, n: int, seqs: int | None = None, context: float | None = None) -> float:
        """One forward pass over ``n`` tokens of ``seqs`` sequences (default n) whose
        KV caches hold ``context`` tokens each (default REF_CONTEXT)."""
        return self.step_at(n, seqs)(context)

    def step_at(self, n: int, seqs: int | None = None) -> Callable[[float | None], float]:
        """``step_s(n, seqs, context)`` as a function of the context: what does not depend on
        it is worked out once (the same floats; a compile's estimate prices one batch at
        many contexts)."""
        fixed, kv_bytes, bw, tokens = self.step_terms(n, seqs)

        def at(context: float | None) -> float:   # attn_s inlined: seqs * kv * ctx / bw
            ctx = REF_CONTEXT if context is None else max(float(context), 0.0)
            return fixed + kv_bytes * ctx / bw + tokens
        return at

    def step_terms(self, n: int, seqs: int | None = None) -> tuple[float, float, float, float]:
        """step_at's (fixed, kv_bytes, bw, tokens): one step at context ctx takes
        ``fixed + kv_bytes * ctx / bw + tokens`` seconds."""
        n = max(int(n), 1)
        seqs = n if seqs is None else max(int(seqs), 1)
        return (self.gemm_s(n) + self.fixed_s, seqs * self.kv_bytes_per_ctx_token,
                self.hw.attn_bw, n * self.per_token_s)

    def prefill_s(self, prompt_tokens: int) -> float:
        """One prefill pass over the admitted prompts: large, well-shaped GEMMs (every
        FLOP at the dense GEMM rate for that many rows), no per-token decode overheads."""
        n = max(int(prompt_tokens), 1)
        compute = n * self.flops_per_token_per_gpu / interp_log(self.hw.gemm_flops_table, n)
        return blend(self.mem_s(n), compute, self.hw.blend_p) + self.fixed_s

    def prefill_at(self) -> Callable[[int], float]:
        """``prefill_s`` with what does not depend on the prompt tokens worked out once (the
        GEMM table's segments, a dense model's weight streaming), the same floats: a
        compile's estimate prices 10^4s of distinct prompt-token counts."""
        flops, p, fixed = self.flops_per_token_per_gpu, self.hw.blend_p, self.fixed_s
        table = self.hw.gemm_flops_table
        x_first, y_first, y_last = table[0][0], table[0][1], table[-1][1]
        ends = [x1 for x1, _ in table[1:]]   # interp_log's segment: the first x <= x1
        segments = [(x0, y0, math.log(x1 / x0), y1 - y0)
                    for (x0, y0), (x1, y1) in zip(table, table[1:])]
        mem_s = self.mem_s
        dense_mem = None if self.experts_total else mem_s(1)   # no experts: the same at any n

        def at(prompt_tokens: int) -> float:
            n = max(int(prompt_tokens), 1)
            if n <= x_first:
                rate = y_first
            else:
                k = bisect.bisect_left(ends, n)
                if k == len(ends):
                    rate = y_last
                else:
                    x0, y0, span, rise = segments[k]
                    rate = y0 + math.log(n / x0) / span * rise
            return blend(mem_s(n) if dense_mem is None else dense_mem, n * flops / rate, p) + fixed
        return at


#: Kimi-K2.5 facts (moonshotai/Kimi-K2.5's config.json, its text_config, + specc extras).
KIMI_FACTS: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168,
    "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
    "qk_rope_head_dim": 64, "n_routed_experts": 384, "num_experts_per_tok": 8,
    "weight_gb": 554.0, "active_params_b": 32.0, "total_params_b": 1000.0,
}


def bytes_per_param(facts: dict, quantization: str | None = None, dtype: str | None = None) -> float:
    if facts.get("bytes_per_param"):
        return float(facts["bytes_per_param"])
    if facts.get("weight_gb") and facts.get("total_params_b"):
        return float(facts["weight_gb"]) / float(facts["total_params_b"])
    for key in (quantization, dtype):
        if key and key.lower() in BYTES_PER_PARAM:
            return BYTES_PER_PARAM[key.lower()]
    return 2.0


def params_b(facts: dict) -> tuple[float, float]:
    """(total, active) parameters in billions, estimated from shapes when absent."""
    active = facts.get("active_params_b")
    total = facts.get("total_params_b")
    if active is None:
        h = float(facts.get("hidden_size", 4096))
        layers = float(facts.get("num_hidden_layers", 32))
        vocab = float(facts.get("vocab_size", 32000))
        active = (12 * layers * h * h + 2 * vocab * h) / 1e9
    if total is None:
        bpp = float(facts["bytes_per_param"]) if facts.get("bytes_per_param") else 2.0
        total = float(facts["weight_gb"]) / bpp if facts.get("weight_gb") else float(active)
    return float(total), float(active)


def kv_bytes_per_ctx_token(facts: dict, tp: int, layers: int | None = None) -> float:
    """KV-cache bytes per GPU per context token over all layers (bf16 cache).  MLA
    (``kv_lora_rank``): one latent of rank + rope dims per layer, replicated on every
    TP rank; otherwise K and V of the KV heads, split over TP (replicated past it)."""
    layers = int(facts.get("num_hidden_layers", 32)) if layers is None else layers
    per_layer: float
    if facts.get("kv_lora_rank"):
        per_layer = (int(facts["kv_lora_rank"]) + int(facts.get("qk_rope_head_dim", 64))) * 2
    else:
        heads = int(facts.get("num_attention_heads", 32))
        kvh = int(facts.get("num_key_value_heads") or heads)
        hd = int(facts.get("head_dim") or int(facts.get("hidden_size", 4096)) // max(heads, 1))
        per_layer = 2 * kvh * hd * 2 / min(max(tp, 1), kvh)
    return per_layer * layers


def _per_token_s(facts: dict, tp: int, layers: int, hw: Calibration) -> float:
    """All-reduce volume per token: two all-reduces of ``hidden`` bf16 values per layer."""
    if tp <= 1:
        return 0.0
    busbw = hw.allreduce_busbw()
    if not busbw:
        return 0.0
    h = float(facts.get("hidden_size", 4096))
    return 2 * layers * h * 2 * 2 * (tp - 1) / tp / busbw


def _raw_cost(facts: dict, *, tp: int, fixed_s: float, quantization: str | None = None,
              dtype: str | None = None, hw: Calibration | None = None,
              layers: int | None = None) -> ModelCost:
    hw = hw or calibration()
    total, active = params_b(facts)
    bpp = bytes_per_param(facts, quantization, dtype)
    weight_bytes = float(facts["weight_gb"]) * 1e9 if facts.get("weight_gb") else total * 1e9 * bpp
    E = int(facts.get("n_routed_experts") or facts.get("num_local_experts") or 0)
    k = int(facts.get("num_experts_per_tok") or 0)
    nl = int(facts.get("num_hidden_layers", 32)) if layers is None else layers
    expert_active = 0.0
    if E and k and total > active:
        # active = dense + (k/E) * experts, total = dense + experts
        experts = (total - active) / (1.0 - k / E)
        dense = max(total - experts, 0.0)
        scale = weight_bytes / (total * 1e9)
        dense_b, expert_b = dense * 1e9 * scale, experts * 1e9 * scale
        expert_active = experts * k / E
        moe_layers = max(nl - int(facts.get("first_k_dense_replace", 0) or 0), 0)
    else:
        E = k = moe_layers = 0
        # Dense model: every step reads the active weights.
        dense_b, expert_b = min(weight_bytes, active * 1e9 * bpp), 0.0
    return ModelCost(tp=tp, num_layers=nl,
                     dense_bytes_per_gpu=dense_b / tp, expert_bytes_per_gpu=expert_b / tp,
                     experts_total=E, experts_active=k,
                     flops_per_token_per_gpu=2.0 * active * 1e9 / tp, fixed_s=fixed_s,
                     per_token_s=_per_token_s(facts, tp, nl, hw),
                     expert_flops_per_token_per_gpu=2.0 * expert_active * 1e9 / tp,
                     moe_layers=moe_layers, gemm_launches=GEMMS_PER_LAYER * nl + 1,
                     kv_bytes_per_ctx_token=kv_bytes_per_ctx_token(facts, tp, nl), hw=hw)


def model_cost(facts: dict, *, tp: int = 1, quantization: str | None = None,
               dtype: str | None = None, gpu: str | None = None,
               hw: Calibration | None = None) -> ModelCost:
    """A target model on a TP group of ``gpu`` (a hardware config's ``gpu``: H200, H100)."""
    hw = hw or calibration(gpu)
    layers = int(facts.get("num_hidden_layers", 32))
    return _raw_cost(facts, tp=tp, fixed_s=layer_fixed_s(hw, tp) * layers,
                     quantization=quantization, dtype=dtype, hw=hw)


def draft_cost(facts: dict, *, tp: int = 1, gpu: str | None = None,
               hw: Calibration | None = None) -> ModelCost:
    """An EAGLE draft: a single decoder layer + lm_head, at the target's TP."""
    hw = hw or calibration(gpu)
    return _raw_cost(facts, tp=tp, fixed_s=layer_fixed_s(hw, tp), hw=hw, layers=1)


def ngram_cost(*, tp: int = 1, gpu: str | None = None) -> ModelCost:
    """NGRAM speculation: cheap CPU-side drafting, no draft model (*estimate*)."""
    return ModelCost(tp, 0, 0.0, 0.0, 0, 0, 0.0, NGRAM_FIXED_S, per_token_s=NGRAM_PER_TOKEN_S,
                     hw=calibration(gpu))


def kimi_step_s(hw: Calibration) -> float:
    """The scenario's check: Kimi-K2.5, TP 8, one stream, no speculation, at REF_CONTEXT."""
    return decode_step_s(model_cost(KIMI_FACTS, tp=KIMI_TP, hw=hw), 1)


def calibrate_tp8(cal: dict) -> dict:
    """Solve the TP-8 all-reduce latency of a calibration file's dict so that Kimi-K2.5
    at TP 8 (one stream, no speculation) runs at the scenario's 82 tok/s: everything a
    TP-8 layer costs that one or two GPUs cannot show lands there.  Returns the constant."""
    base = Calibration.from_dict(cal)
    consts = dict(base.constants)
    consts[f"allreduce_latency_tp{KIMI_TP}_s"] = {"value": 0.0}
    without = kimi_step_s(Calibration.from_dict({**cal, "constants": consts}))
    per_ar = (KIMI_STEP_S - without) / (2 * KIMI_FACTS["num_hidden_layers"])
    return {f"allreduce_latency_tp{KIMI_TP}_s": {
        "value": per_ar, "unit": "s",
        "source": f"calibrated to scenario 82 tok/s (Kimi-K2.5, TP 8, {base.kind.upper()})",
        "note": ("not measurable on 1-2 GPUs: one all-reduce at TP 8 plus whatever else a TP-8 "
                 "decoder layer costs beyond the measured terms (MLA attention kernels, INT4 MoE "
                 f"kernels, scheduling), solved so that Kimi-K2.5 at TP 8 decodes "
                 f"{KIMI_BASELINE_TOK_S:g} tok/s per stream at concurrency 1 and context "
                 f"{REF_CONTEXT}; the residual left after the measured constants: "
                 f"{(KIMI_STEP_S - without) * 1e3:.2f} of {KIMI_STEP_S * 1e3:.2f} ms per step")}}


# --- model vs measurement -----------------------------------------------------
def model_vs_measurement(hw: Calibration) -> dict[str, list[dict]]:
    """The calibration file's measured tables next to the model's figure for the same
    shapes: ``{table: [{"tokens", "measured_s", "model_s", "error"}]}``."""
    m = hw.measurements
    out: dict[str, list[dict]] = {}

    def row(n, meas, model):
        return {"tokens": n, "measured_s": meas, "model_s": model, "error": model / meas - 1.0}

    d = m.get("dense")
    if d:
        layers = int(d["shape"]["layers"])
        cost = ModelCost(1, layers, d["params"] * 2.0, 0.0, 0, 0, 2.0 * d["params"], 0.0,
                         gemm_launches=GEMMS_PER_LAYER * layers + 1, hw=hw)
        out["dense"] = [row(r["tokens"], r["median_s"], cost.gemm_s(r["tokens"])) for r in d["rows"]]
    mo = m.get("moe")
    if mo:
        sh = mo["shape"]
        E, k = int(sh["experts"]), int(sh["active"])
        other = mo["rows"][0]["other_bytes"]
        eb = float(mo["expert_bytes"])
        per_tok_flops = mo["rows"][0]["flops"] / mo["rows"][0]["tokens"]
        expert_flops = per_tok_flops * k * eb / (k * eb + other)
        cost = ModelCost(int(sh.get("tp", 8)), 1, other, E * eb, E, k, per_tok_flops, 0.0,
                         expert_flops_per_token_per_gpu=expert_flops, moe_layers=1,
                         gemm_launches=3, hw=hw)
        out["moe"] = [row(r["tokens"], r["median_s"], cost.gemm_s(r["tokens"])) for r in mo["rows"]]
    for name, dr in (m.get("draft") or {}).items():
        cost = ModelCost(1, 1, dr["params_per_gpu"] * 2.0, 0.0, 0, 0, 2.0 * dr["params_per_gpu"],
                         0.0, gemm_launches=int(dr["gemms"]), hw=hw)
        out[f"draft {name}"] = [row(r["tokens"], r["median_s"], cost.gemm_s(r["tokens"]))
                                for r in dr["rows"]]
    return out


# --- speculation ------------------------------------------------------------
#: Per-position draft acceptance probability when none is given.  *Estimate*:
#: 0.7 gives a 3-step chain 2.53 tokens per step, in the range EAGLE-3 papers
#: and SGLang's published runs report for chat data (2.4-3.2 at 3 steps).
DEFAULT_ACCEPTANCE = 0.7

#: A draft's acceptance falls as the context grows past the length it was trained on.
#: Published measurement (vllm-project/speculators PR #684, "Acceptance Length vs Context
#: Length": an EAGLE-3 draft for Qwen3-8B on LongBench-v2 truncated to each length,
#: temperature 0, acceptance read from vLLM's Prometheus counters): accept length
#: 2.295 at 2k, 2.040 at 4k, 1.863 at 6k, 1.687 at 8k, 1.400 at 10k, 1.289 at 12k,
#: 1.161 at 14k, 1.090 at 16k, 1.084 at 20k tokens. The same collapse past a 2k-trained
#: draft's window is reported in sgl-project/sglang issue #6783 and in OWL (Lee et al.,
#: arXiv 2510.07535: EAGLE-3 slower than no speculation on long inputs). As a factor on
#: the per-position acceptance: the published accepted drafts per step (accept length - 1)
#: relative to 2k's (exact for one draft step; for more, the same fall in the chain's
#: first position). (context tokens, factor), linear in between, flat past the ends.
CONTEXT_ACCEPTANCE = ((2048, 1.0), (4096, 0.803), (6144, 0.666), (8192, 0.530),
                      (10240, 0.309), (12288, 0.223), (14336, 0.124), (16384, 0.070),
                      (20480, 0.065))


def context_acceptance_factor(context_tokens: float) -> float:
    """The factor on a draft's per-position acceptance at this many context tokens
    (prompt + generated so far); 1 up to 2k tokens (CONTEXT_ACCEPTANCE)."""
    pts = CONTEXT_ACCEPTANCE
    if context_tokens <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if context_tokens <= x1:
            return y0 + (y1 - y0) * (context_tokens - x0) / (x1 - x0)
    return pts[-1][1]


def chain_accept_length(a: float, k: int) -> float:
    """Expected tokens per verify step for a chain of k drafts: (1 - a^(k+1)) / (1 - a)."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def effective_depth_and_accept(a: float, num_steps: int, topk: int,
                               num_draft_tokens: int) -> tuple[int, float]:
    """(depth, per-position acceptance) used for chain and tree (see module doc)."""
    if topk <= 1:
        return num_steps, a
    depth = max(0, min(num_steps, num_draft_tokens - 1))
    if depth == 0:
        return 0, a
    candidates = max(1.0, min(float(topk), (num_draft_tokens - 1) / depth))
    return depth, 1.0 - (1.0 - a) ** candidates


def expected_accept_length(a: float, num_steps: int, topk: int = 1,
                           num_draft_tokens: int | None = None) -> float:
    if num_draft_tokens is None:
        num_draft_tokens = num_steps + 1
    depth, a_eff = effective_depth_and_accept(a, num_steps, topk, num_draft_tokens)
    return min(chain_accept_length(a_eff, depth), float(num_steps + 1))


def sample_accept(rng: random.Random, a_eff: float, depth: int) -> int:
    """Tokens emitted by one verify step: accepted drafts (Bernoulli(a_eff) per
    position until the first reject) plus the bonus token."""
    n = 1
    for _ in range(depth):
        if rng.random() < a_eff:
            n += 1
        else:
            break
    return n


@dataclass(frozen=True)
class SpecConfig:
    num_steps: int
    topk: int
    num_draft_tokens: int
    acceptance: float


# --- the speculative step's own overheads ----------------------------------------
# What a speculative step costs beyond the forward passes above, solved from published
# SGLang measurements (a step measured as accept length / throughput): most of it is CPU
# work between passes that no kernel timing sees. Its GPU share (select per draft pass,
# greedy sampling, the tree mask) was measured on an H200 (calibration section
# spec_step) and must fit inside these; docs/fidelity.md lists both.
#: Each draft pass (num_steps decode passes + the draft-extend pass): graph replay
#: launch, top-k over the draft vocabulary, CPU between passes. *Calibrated*: SGLang PR
#: 4247 (Llama-3.1-8B + EAGLE-3, H100, MT-Bench, batch 1, CUDA graphs): 361.70 tok/s at
#: accept length 4.68 with 5 steps, 378.57 at 5.39 with 8 steps; the 3 extra passes cost
#: 0.39 ms beyond their forward passes.
SPEC_DRAFT_PASS_S = 0.130e-3
#: Each verify step, chain or tree: sampling the target's logits, the accept kernel, KV
#: bookkeeping (freeing rejected slots, sequence lengths), scheduling the next step.
#: *Calibrated*: SpecForge issue 339 (Qwen3-30B-A3B + EAGLE-3, 2x H100, MT-Bench,
#: batch 1, chain 3/1/4: 159.78 tok/s at accept length 1.86), after the draft passes.
SPEC_VERIFY_FIXED_S = 0.90e-3
#: A tree (topk > 1), per verified draft token: top-k over topk + (steps-1) topk^2
#: candidates (organize_draft_results), building the tree and its attention mask.
#: *Calibrated*: PR 4247's 5-step run (topk 8, 64 draft tokens) after the two above.
SPEC_TREE_PER_DRAFT_TOKEN_S = 0.0477e-3


def spec_overhead_s(spec: SpecConfig, draft: ModelCost | None = None) -> float:
    """Seconds a speculative step costs outside its forward passes (see the constants)."""
    passes = (spec.num_steps + 1) if draft is None or draft.num_layers else 0   # NGRAM: none
    tree = (spec.num_draft_tokens - 1) * SPEC_TREE_PER_DRAFT_TOKEN_S if spec.topk > 1 else 0.0
    return SPEC_VERIFY_FIXED_S + passes * SPEC_DRAFT_PASS_S + tree


def decode_step_s(target: ModelCost, b: int, spec: SpecConfig | None = None,
                  draft: ModelCost | None = None, context: float | None = None) -> float:
    """Wall time of one decode step for b running requests of ``context`` KV tokens each."""
    return decode_step_at(target, b, spec, draft)(context)


def decode_step_at(target: ModelCost, b: int, spec: SpecConfig | None = None,
                   draft: ModelCost | None = None) -> Callable[[float | None], float]:
    """``decode_step_s`` at one batch size as a function of the context (see step_at)."""
    b = max(int(b), 1)
    if spec is None:
        return target.step_at(b, b)
    draft_step = (draft or target).step_at(b * spec.topk, b)
    verify = target.step_at(b * spec.num_draft_tokens, b)
    passes, overhead = spec.num_steps + 1, spec_overhead_s(spec, draft)
    return lambda context: passes * draft_step(context) + verify(context) + overhead


def tokens_per_s_per_stream(target: ModelCost, b: int, spec: SpecConfig | None = None,
                            draft: ModelCost | None = None, context: float | None = None) -> float:
    return tokens_per_s_per_stream_at(target, b, spec, draft)(context)


def per_stream_terms(target: ModelCost, b: int, spec: SpecConfig | None = None,
                     draft: ModelCost | None = None) -> tuple:
    """What ``tokens_per_s_per_stream`` at one batch size needs besides the context ``ctx``:
    ``(tok, fv, kv, wv, tv, passes, fd, kd, wd, td, overhead)``; the rate is
    ``tok / (fv + kv * ctx / wv + tv)`` without speculation (``passes`` None), else
    ``tok / (passes * (fd + kd * ctx / wd + td) + (fv + kv * ctx / wv + tv) + overhead)``
    (decode_step_at's steps inlined, the same floats: a compile's estimate asks 10^5 times,
    writing it out per point)."""
    tok = 1.0 if spec is None else expected_accept_length(
        spec.acceptance, spec.num_steps, spec.topk, spec.num_draft_tokens)
    b = max(int(b), 1)
    fv, kv, wv, tv = target.step_terms(b if spec is None else b * spec.num_draft_tokens, b)
    if spec is None:
        return tok, fv, kv, wv, tv, None, 0.0, 0.0, 1.0, 0.0, 0.0
    fd, kd, wd, td = (draft or target).step_terms(b * spec.topk, b)
    return tok, fv, kv, wv, tv, spec.num_steps + 1, fd, kd, wd, td, spec_overhead_s(spec, draft)


def tokens_per_s_per_stream_at(target: ModelCost, b: int, spec: SpecConfig | None = None,
                               draft: ModelCost | None = None) -> Callable[[float | None], float]:
    """``tokens_per_s_per_stream`` at one batch size as a function of the context."""
    tok, fv, kv, wv, tv, passes, fd, kd, wd, td, overhead = per_stream_terms(target, b, spec, draft)
    if passes is None:
        def plain(context: float | None) -> float:
            ctx = REF_CONTEXT if context is None else max(float(context), 0.0)
            return tok / (fv + kv * ctx / wv + tv)
        return plain

    def speculative(context: float | None) -> float:
        ctx = REF_CONTEXT if context is None else max(float(context), 0.0)
        return tok / (passes * (fd + kd * ctx / wd + td) + (fv + kv * ctx / wv + tv) + overhead)
    return speculative


def speedup(target: ModelCost, b: int, spec: SpecConfig, draft: ModelCost | None = None,
            context: float | None = None) -> float:
    return (tokens_per_s_per_stream(target, b, spec, draft, context)
            / tokens_per_s_per_stream(target, b, context=context))


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "math", "Callable")]
