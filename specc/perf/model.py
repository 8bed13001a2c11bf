"""The simulator's performance model: pure functions, no I/O.

Every constant names its source.  Numbers marked *calibrated* were solved so
that the scenario's measured figure comes out (Kimi-K2.5, TP 8, H200, about
82 output tokens/s per stream at concurrency 1 without speculation,
``/work/shared/reference/scenario.md``); numbers marked *estimate* are order-of-
magnitude engineering estimates, stated so that they can be replaced by
measurements.

Model of one scheduler step (SGLang runs one forward pass per step for the
whole running batch; CUDA graphs remove launch overhead but not the per-layer
fixed latencies):

    t(n) = max(t_mem(n), t_compute(n)) + T_FIXED + n * T_PER_TOKEN

where ``n`` is the number of tokens processed in the step (batch size ``b``
for plain decode, ``b * num_draft_tokens`` for a speculative verify pass):

* ``t_mem``: bytes read from HBM per GPU / effective bandwidth.  Dense weights
  are read once per step.  For a Mixture-of-Experts model only the experts hit
  by at least one of the ``n`` tokens are read: with ``E`` routed experts and
  ``k`` active per token (uniform routing), the expected touched fraction is
  ``1 - (1 - k/E)^n``.  This is why MoE decode is memory-bound yet gets
  slower as the batch grows, and the main reason speculation's speedup
  shrinks with concurrency on Kimi-class models.
* ``t_compute``: ``2 * active_params`` FLOPs per token, split over TP ranks,
  at an effective (not peak) throughput.
* ``T_FIXED``: per-step latency that does not depend on the batch: per-layer
  kernel chains and TP all-reduce latency (61 layers x 2 all-reduces at TP 8),
  scheduling, sampling launch.  *Calibrated* from the 82 tok/s baseline.
* ``T_PER_TOKEN``: per-token costs outside the weight GEMMs: attention over
  the KV cache, all-reduce volume, logits/sampling.  *Estimate*.

Speculation (EAGLE/EAGLE3 chain or tree):

    t_spec(b) = (num_steps + 1) * t_draft(b * topk) + t(b * num_draft_tokens)

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

import random
from dataclasses import dataclass

# --- hardware (NVIDIA H200 SXM datasheet) -----------------------------------
#: HBM3e peak bandwidth per GPU, bytes/s (NVIDIA H200 datasheet: 4.8 TB/s).
HBM_PEAK_BPS = 4.8e12
#: Achievable fraction of peak for decode GEMV/grouped-GEMM reads.  *Estimate*:
#: memory-bound kernels typically reach 60-70 % of HBM peak; we take 0.65.
HBM_EFFICIENCY = 0.65
HBM_EFFECTIVE_BPS = HBM_PEAK_BPS * HBM_EFFICIENCY
#: Dense BF16/FP8 tensor throughput per GPU (datasheet: ~989 TFLOPS dense BF16).
PEAK_FLOPS = 989e12
#: Achieved fraction for decode-shaped MoE GEMMs (small M per expert). *Estimate*.
FLOPS_EFFICIENCY = 0.20
EFFECTIVE_FLOPS = PEAK_FLOPS * FLOPS_EFFICIENCY
#: Prefill runs large, well-shaped GEMMs (thousands of tokens per expert batch).
#: *Estimate*: 60 % of dense peak, typical of compute-bound transformer prefill.
PREFILL_FLOPS_EFFICIENCY = 0.60

# --- per-step costs ---------------------------------------------------------
#: Per-token cost outside the weight GEMMs (attention, all-reduce volume,
#: sampling).  *Estimate*: 40 us per token per step at TP 8.
T_PER_TOKEN_S = 40e-6
#: Target step time measured in the scenario: 1 / 82 tok/s = 12.2 ms.
KIMI_BASELINE_TOK_S = 82.0
KIMI_STEP_S = 1.0 / KIMI_BASELINE_TOK_S
#: Per-layer fixed latency.  *Calibrated*: T_FIXED for Kimi-K2.5 TP 8 (61
#: layers) = 12.2 ms - t_mem(1) - T_PER_TOKEN, divided over 61 layers, i.e.
#: ~187 us per layer (MLA + MoE dispatch/combine kernels + 2 all-reduces).
#: Other models scale with their layer count; TP 1 has no all-reduce, which we
#: model as half the per-layer latency (*estimate*).
KIMI_LAYERS = 61
#: Draft forward pass fixed latency (one EAGLE-3 layer + draft lm_head, CUDA
#: graph).  *Estimate*: 0.3 ms.
T_DRAFT_FIXED_S = 0.3e-3
#: Prefill: compute-bound, same effective FLOPs as decode GEMMs.  Prefill of
#: newly admitted requests blocks the decode batch for its duration (SGLang
#: runs prefill and decode batches alternately, without mixed chunking).

#: Bytes per parameter by quantization (weights only).  INT4 with group scales
#: ~0.55 B (Kimi-K2.5: ~554 GB for ~1.0T params); FP8 1 B; BF16/FP16 2 B.
BYTES_PER_PARAM = {"int4": 0.554, "awq": 0.554, "gptq": 0.554, "compressed-tensors": 0.554,
                   "w4afp8": 0.554, "fp8": 1.0, "modelopt_fp8": 1.0, "bf16": 2.0}


@dataclass(frozen=True)
class ModelCost:
    """What the step-time model needs to know about one model on one TP group."""

    tp: int
    num_layers: int
    dense_bytes_per_gpu: float     # weights read every step regardless of n
    expert_bytes_per_gpu: float    # all routed experts (0 for dense models)
    experts_total: int             # E (0 for dense)
    experts_active: int            # k
    flops_per_token_per_gpu: float
    fixed_s: float
    #: Per-token decode cost. The draft pays it too: its lm_head, sampling and
    #: tree bookkeeping per drafted token are not cheaper per token (*estimate*).
    per_token_s: float = T_PER_TOKEN_S

    # -- the step model ------------------------------------------------------
    def mem_s(self, n: int) -> float:
        read = self.dense_bytes_per_gpu
        if self.experts_total:
            frac = 1.0 - (1.0 - self.experts_active / self.experts_total) ** max(n, 1)
            read += self.expert_bytes_per_gpu * frac
        return read / HBM_EFFECTIVE_BPS

    def compute_s(self, n: int) -> float:
        return n * self.flops_per_token_per_gpu / EFFECTIVE_FLOPS

    def step_s(self, n: int) -> float:
        """One forward pass over ``n`` tokens (decode: n = batch size)."""
        n = max(int(n), 1)
        return max(self.mem_s(n), self.compute_s(n)) + self.fixed_s + n * self.per_token_s

    def prefill_s(self, prompt_tokens: int) -> float:
        """One prefill pass over the admitted prompts: compute-bound, no per-token decode
        overheads (attention and all-reduce are batched over the whole prompt)."""
        n = max(int(prompt_tokens), 1)
        compute = self.compute_s(n) * FLOPS_EFFICIENCY / PREFILL_FLOPS_EFFICIENCY
        return max(self.mem_s(n), compute) + self.fixed_s


def _fixed_per_layer_s() -> float:
    # Solve the Kimi calibration: step_s(1) == KIMI_STEP_S.
    kimi = _raw_cost(KIMI_FACTS, tp=8, fixed_s=0.0)
    return (KIMI_STEP_S - max(kimi.mem_s(1), kimi.compute_s(1)) - T_PER_TOKEN_S) / KIMI_LAYERS


#: Kimi-K2.5 facts (config.json text_config + specc extras; engines.md table).
KIMI_FACTS = {
    "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168,
    "n_routed_experts": 384, "num_experts_per_tok": 8, "weight_gb": 554.0,
    "active_params_b": 32.0, "total_params_b": 1000.0,
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


def _raw_cost(facts: dict, *, tp: int, fixed_s: float, quantization: str | None = None,
              dtype: str | None = None) -> ModelCost:
    total, active = params_b(facts)
    bpp = bytes_per_param(facts, quantization, dtype)
    weight_bytes = float(facts["weight_gb"]) * 1e9 if facts.get("weight_gb") else total * 1e9 * bpp
    E = int(facts.get("n_routed_experts") or facts.get("num_local_experts") or 0)
    k = int(facts.get("num_experts_per_tok") or 0)
    if E and k and total > active:
        # active = dense + (k/E) * experts, total = dense + experts
        experts = (total - active) / (1.0 - k / E)
        dense = max(total - experts, 0.0)
        scale = weight_bytes / (total * 1e9)
        dense_b, expert_b = dense * 1e9 * scale, experts * 1e9 * scale
    else:
        E = k = 0
        # Dense model: every step reads the active weights.
        dense_b, expert_b = min(weight_bytes, active * 1e9 * bpp), 0.0
    return ModelCost(tp=tp, num_layers=int(facts.get("num_hidden_layers", 32)),
                     dense_bytes_per_gpu=dense_b / tp, expert_bytes_per_gpu=expert_b / tp,
                     experts_total=E, experts_active=k,
                     flops_per_token_per_gpu=2.0 * active * 1e9 / tp, fixed_s=fixed_s)


def model_cost(facts: dict, *, tp: int = 1, quantization: str | None = None,
               dtype: str | None = None) -> ModelCost:
    per_layer = _fixed_per_layer_s()
    if tp <= 1:
        per_layer *= 0.5  # no all-reduce (*estimate*, see KIMI_LAYERS)
    layers = int(facts.get("num_hidden_layers", 32))
    return _raw_cost(facts, tp=tp, fixed_s=per_layer * layers, quantization=quantization,
                     dtype=dtype)


def draft_cost(facts: dict, *, tp: int = 1) -> ModelCost:
    """An EAGLE draft: a single layer; fixed latency T_DRAFT_FIXED_S."""
    c = _raw_cost(facts, tp=tp, fixed_s=T_DRAFT_FIXED_S)
    return c


# --- speculation ------------------------------------------------------------
#: Per-position draft acceptance probability when none is given.  *Estimate*:
#: 0.7 gives a 3-step chain 2.53 tokens per step, in the range EAGLE-3 papers
#: and SGLang's published runs report for chat data (2.4-3.2 at 3 steps).
DEFAULT_ACCEPTANCE = 0.7

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


def decode_step_s(target: ModelCost, b: int, spec: SpecConfig | None = None,
                  draft: ModelCost | None = None) -> float:
    """Wall time of one decode step for b running requests."""
    b = max(int(b), 1)
    if spec is None:
        return target.step_s(b)
    d = draft or target
    draft_s = (spec.num_steps + 1) * d.step_s(b * spec.topk)
    return draft_s + target.step_s(b * spec.num_draft_tokens)


def tokens_per_s_per_stream(target: ModelCost, b: int, spec: SpecConfig | None = None,
                            draft: ModelCost | None = None) -> float:
    tok = 1.0 if spec is None else expected_accept_length(
        spec.acceptance, spec.num_steps, spec.topk, spec.num_draft_tokens)
    return tok / decode_step_s(target, b, spec, draft)


def speedup(target: ModelCost, b: int, spec: SpecConfig, draft: ModelCost | None = None) -> float:
    return tokens_per_s_per_stream(target, b, spec, draft) / tokens_per_s_per_stream(target, b)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "math")]
