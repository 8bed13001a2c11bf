"""Command line of ``python -m specc.sim`` (SGLang's launch_server flags +
``--sim-*``) and the server arguments resolved as SGLang resolves them.

SGLang flags keep SGLang 0.5.23's names, types and defaults
(``srt/arg_groups/fields/*.py``, ``srt/server_args.py``); unknown flags are
rejected by argparse ("error: unrecognized arguments", exit 2) and so is an
ambiguous prefix such as ``--cuda-graph-max-bs`` (``--cuda-graph-max-bs-decode``
or ``--cuda-graph-max-bs-prefill``), exactly as SGLang's own argparse parser does.
"""

from __future__ import annotations

import argparse
import json

from specc.engines import sglang as sg
from specc.facts import flatten_config, kv_bytes_per_token
from specc.facts import read_config_json as read_model_config

from specc.perf import model as perf

from . import versions
from .faults import Fault, fault_help


#: Share of requests that carry tokens without text (--sim-textless): occasional, as a
#: real model's answers are, so every suite run meets them (stream.HeldText).
TEXTLESS_RATE = 0.05


def _json_obj(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specc.sim",
        description="A simulated SGLang server (sglang.launch_server flags + --sim-* knobs).",
        epilog=fault_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    # --- SGLang (server_args.py) -------------------------------------------
    a("--model-path", "--model", type=str, required=True)
    a("--tokenizer-path", type=str, default=None)
    a("--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size")
    a("--dp-size", "--data-parallel-size", type=int, default=1, dest="dp_size")
    a("--pp-size", "--pipeline-parallel-size", type=int, default=1, dest="pp_size")
    a("--ep-size", "--expert-parallel-size", type=int, default=1, dest="ep_size")
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=31000)
    a("--mem-fraction-static", type=float, default=None)
    a("--context-length", type=int, default=None)
    a("--trust-remote-code", action="store_true")
    # 0.5.23 has only the per-phase flags: "--cuda-graph-max-bs" is an ambiguous prefix.
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--cuda-graph-max-bs-prefill", type=int, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--served-model-name", type=str, default=None)
    # srt/utils/auth.py: every route but /health*, /ready*, /metrics* needs the key
    a("--api-key", type=str, default=None)
    a("--attention-backend", type=str, default=None)
    a("--log-level", type=str, default="info")
    a("--enable-metrics", action="store_true")
    a("--disable-cuda-graph", action="store_true")   # deprecated in 0.5.23, still accepted
    a("--disable-cuda-graph-padding", action="store_true")
    a("--dtype", type=str, default="auto")
    a("--kv-cache-dtype", type=str, default="auto")
    a("--quantization", type=str, default=None)
    a("--page-size", type=int, default=None)
    # the radix (prefix) cache: on by default; its hits reported in OpenAI usage only with
    # --enable-cache-report (srt/entrypoints/openai/usage_processor.py)
    a("--disable-radix-cache", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--random-seed", type=int, default=None)
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--dist-init-addr", type=str, default=None)
    a("--speculative-algorithm", type=str, default=None,
      choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
    a("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--speculative-token-map", type=str, default=None)
    a("--speculative-attention-mode", type=str, default="prefill", choices=["prefill", "decode"])
    a("--speculative-draft-attention-backend", type=str, default=None)
    a("--speculative-ngram-max-bfs-breadth", type=int, default=10)
    # srt/arg_groups/fields/spec.py: num_steps by batch size (specc/sim/adaptive.py)
    a("--speculative-adaptive", action="store_true")
    a("--speculative-adaptive-config", type=str, default=None)
    a("--decode-log-interval", type=int, default=40)
    # --- simulator only ------------------------------------------------------
    s = p.add_argument_group("simulator")
    s.add_argument("--sim-time-scale", type=float, default=0.01,
                   help="multiplies the realistic startup phase durations "
                        "(specc.engines.sglang.estimate_phase_seconds); 1.0 = realistic "
                        "minutes; default 0.01. Token timing is always real time.")
    s.add_argument("--sim-version", choices=sorted(versions.VERSIONS), default=versions.DEFAULT,
                   help="SGLang version to emulate: its log strings and startup order "
                        f"(default {versions.DEFAULT}; early-2026 = the incident's strings)")
    s.add_argument("--sim-seed", type=int, default=0, help="seed of all randomness (default 0)")
    s.add_argument("--sim-fault", type=str, default=None,
                   help="fault to inject, see below; wins over $SPECC_SIM_FAULT")
    s.add_argument("--sim-acceptance", type=float, default=perf.DEFAULT_ACCEPTANCE,
                   help="per-position draft acceptance probability a (default 0.7: a 3-step "
                        "chain then accepts (1-a^4)/(1-a) = 2.53 tokens/step, within the "
                        "2-3 range EAGLE-3 papers and SGLang logs report on chat data)")
    s.add_argument("--sim-textless", type=float, default=TEXTLESS_RATE, metavar="SHARE",
                   help="share of requests with tokens that show no text, as a detokenizer "
                        "holds back a UTF-8 character split over tokens (cut short at the "
                        "end by max_tokens, or special tokens under ignore_eos); the usage "
                        f"counts them (default {TEXTLESS_RATE}; 0 = never)")
    s.add_argument("--sim-gpu", type=str, default=None, metavar="KIND",
                   help="GPU kind whose calibration (specc/perf/calibration/KIND.json) times "
                        "the steps, e.g. H200, H100 (default: H200)")
    s.add_argument("--sim-target-facts", type=_json_obj, default=None, metavar="JSON",
                   help="config.json-style facts of the target (+ weight_gb, active_params_b) "
                        "used where --model-path has no readable config.json")
    s.add_argument("--sim-draft-facts", type=_json_obj, default=None, metavar="JSON",
                   help="same for --speculative-draft-model-path")
    return p


# --- model facts ------------------------------------------------------------
#: Fallback target when neither config.json nor --sim-target-facts exist: a
#: Llama-3.1-8B-shaped dense model in BF16 (meta-llama/Llama-3.1-8B-Instruct's config.json).
DEFAULT_TARGET_FACTS = {
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "weight_gb": 16.0, "active_params_b": 8.0,
}
#: Fallback draft: one EAGLE-3 layer; its context keys are copied from the
#: target so that a draft without facts never triggers the mismatch.
DEFAULT_DRAFT_FACTS = {
    "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
    "weight_gb": 2.0, "active_params_b": 1.0,
}


def read_config_json(path: str | None) -> dict | None:
    """config.json at a model directory (or the file itself), flattened as the compiler does."""
    found = read_model_config(path) if path else None
    return None if found is None else flatten_config(found[0])


def resolve_facts(path: str | None, flag_facts: dict | None, default: dict) -> tuple[dict, str]:
    """Facts of one model: config.json keys (read when a readable config.json
    exists at ``path``) override ``--sim-*-facts`` (which also supply the specc
    extras weight_gb / active_params_b); with neither, ``default``."""
    cfg = read_config_json(path)
    if cfg is None and flag_facts is None:
        return dict(default), "defaults"
    facts = dict(flag_facts or {})
    if cfg is not None:
        facts.update(cfg)
        return facts, "config.json"
    return facts, "--sim-facts"


# --- the server arguments as SGLang resolves them ----------------------------
#: H200 usable HBM as torch reports it ("avail mem" at start), GB.
GPU_MEM_GB = 139.8
#: estimate_phase_seconds' names -> the phase names of versions.ORDER
_ESTIMATE_NAMES = {"capture_cuda_graph": "target_graph",
                   "capture_draft_cuda_graph": "capture_draft_decode_cuda_graph"}


class UsageError(Exception):
    pass


class Sim:
    """ServerArgs after SGLang's resolution, plus the simulator's own derived numbers."""

    def __init__(self, args, fault: Fault | None):
        self.args = args
        self.fault = fault
        self.version = args.sim_version
        self.strings = versions.VERSIONS[self.version]
        self.behaviour = versions.BEHAVIOUR[self.version]
        self.tp = max(1, args.tp_size)
        self.target, self.target_src = resolve_facts(args.model_path, args.sim_target_facts,
                                                     DEFAULT_TARGET_FACTS)
        algo = args.speculative_algorithm
        if algo == "NEXTN":
            algo = "EAGLE"   # SGLang renames NEXTN to EAGLE
        self.algorithm = algo
        self.speculative = algo is not None
        self.has_draft = algo in ("EAGLE", "EAGLE3", "STANDALONE")
        draft_default = dict(DEFAULT_DRAFT_FACTS)
        for key in sg.CONTEXT_KEYS + ("rope_scaling",):
            if key in self.target:
                draft_default[key] = self.target[key]
        self.draft, self.draft_src = (resolve_facts(
            args.speculative_draft_model_path, args.sim_draft_facts, draft_default)
            if self.has_draft else ({}, "none"))
        self.arch = (self.target.get("architectures") or ["LlamaForCausalLM"])[0]
        self.context_length = args.context_length or sg.derived_context_length(self.target)
        self.warnings: list[str] = []
        self.spec: perf.SpecConfig | None = None
        #: --speculative-adaptive: its config file ("default": DEFAULT_ADAPTIVE_CONFIG)
        self.adaptive_config: str | None = None
        given_running = args.max_running_requests   # before speculation's default of 48
        if algo == "NGRAM":
            self._resolve_ngram()
        elif self.speculative:
            self._resolve_eagle()
        if args.max_running_requests is None:
            args.max_running_requests = 4096
        self.max_running = args.max_running_requests
        self.served_name = args.served_model_name or args.model_path
        gpu = args.sim_gpu
        self.cost = perf.model_cost(self.target, tp=self.tp, quantization=args.quantization,
                                    dtype=args.dtype, gpu=gpu)
        self.draft_cost = (perf.draft_cost(self.draft, tp=self.tp, gpu=gpu)
                           if self.has_draft else None)
        if self.speculative and not self.has_draft:  # NGRAM: cheap CPU-side drafting
            self.draft_cost = perf.ngram_cost(tp=self.tp, gpu=gpu)
        tw = self.cost.dense_bytes_per_gpu + self.cost.expert_bytes_per_gpu
        self.weight_gb_per_gpu = tw / 1e9
        dw = self.draft_cost.dense_bytes_per_gpu if self.has_draft else 0.0  # type: ignore[union-attr]  # a draft: its cost
        self.draft_weight_gb_per_gpu = dw / 1e9
        est = sg.estimate_phase_seconds(
            weight_gb_per_gpu=self.weight_gb_per_gpu,
            draft_weight_gb_per_gpu=self.draft_weight_gb_per_gpu,
            speculative=self.has_draft, num_steps=args.speculative_num_steps if self.has_draft
            else None)
        scaled = {_ESTIMATE_NAMES.get(k, k): v * args.sim_time_scale for k, v in est.items()}
        self.phases = [p for p in versions.ORDER[self.version] if p in scaled]
        self.phase_s = scaled
        #: the target's graph phase: "target verify" with speculation, else "target decode"
        self.target_graph = "target verify" if self.speculative else "target decode"
        # KV pool: one source with the compiler (memory fraction, bytes per token, reserve).
        self.mla = bool(self.target.get("kv_lora_rank")
                        or (self.target.get("text_config") or {}).get("kv_lora_rank"))
        self.mem_fraction = args.mem_fraction_static or sg.auto_mem_fraction_static(
            gpu_memory_gb=GPU_MEM_GB, tp=self.tp, pp=max(1, args.pp_size),
            max_running_requests=given_running, cuda_graph_max_bs=args.cuda_graph_max_bs_decode,
            mla=self.mla)
        kv_bytes_tok = max(1.0, kv_bytes_per_token(self.target, tp=self.tp,
                                                   kv_cache_dtype=args.kv_cache_dtype))
        self.kv_gb = max(1.0, GPU_MEM_GB * self.mem_fraction - self.weight_gb_per_gpu
                         - self.draft_weight_gb_per_gpu)
        self.max_total_tokens = int(self.kv_gb * 1e9 / kv_bytes_tok)

    def _max_running_default(self) -> None:
        if self.args.max_running_requests is None:
            self.args.max_running_requests = sg.SPEC_DEFAULT_MAX_RUNNING_REQUESTS
            self.warnings.append(self.strings["max_running_reset"][0])

    def _resolve_adaptive(self) -> None:
        """speculative_hook.py ``_maybe_disable_adaptive`` then
        ``_init_adaptive_speculative_params``: topk 1, num_steps one of the config's
        candidates (the middle one when not given), num_draft_tokens = num_steps + 1."""
        from .adaptive import ConfigError, candidate_union

        a = self.args
        if not a.speculative_adaptive:
            return
        reason = None
        if self.algorithm not in ("EAGLE", "EAGLE3"):
            reason = (f"speculative_algorithm={self.algorithm} (only EAGLE/EAGLE3 are "
                      "supported)")
        elif a.speculative_eagle_topk is not None and a.speculative_eagle_topk != 1:
            reason = f"speculative_eagle_topk={a.speculative_eagle_topk} (only topk=1 is supported)"
        if reason:
            self.warnings.append(f"speculative_adaptive disabled: {reason}. Falling back to "
                                 "static speculative params.")
            a.speculative_adaptive = False
            return
        try:
            union = candidate_union(a.speculative_adaptive_config)
        except ConfigError as e:
            raise UsageError(f"ValueError: {e}") from None
        a.speculative_eagle_topk = 1
        if a.speculative_num_steps is None:
            a.speculative_num_steps = union[len(union) // 2]
        if a.speculative_num_steps not in union:
            raise UsageError(f"ValueError: --speculative-num-steps={a.speculative_num_steps} "
                             f"is not in the adaptive config candidate_steps {union}. Pass "
                             "one of those values.")
        a.speculative_num_draft_tokens = a.speculative_num_steps + 1
        self.adaptive_config = a.speculative_adaptive_config or "default"

    def _resolve_eagle(self) -> None:
        """srt/arg_groups/speculative_hook.py ``_handle_eagle_family``."""
        a = self.args
        self._resolve_adaptive()
        steps, topk, ndt = (a.speculative_num_steps, a.speculative_eagle_topk,
                            a.speculative_num_draft_tokens)
        self._max_running_default()
        if steps is None:
            if topk is not None or ndt is not None:
                raise UsageError("speculative_num_steps, speculative_eagle_topk and "
                                 "speculative_num_draft_tokens must be all given or all omitted")
            steps, topk, ndt = ((3, 1, 4) if self.algorithm == "STANDALONE"
                                else sg.default_spec_params(self.arch))
        elif topk is None or ndt is None:
            raise UsageError("speculative_num_steps, speculative_eagle_topk and "
                             "speculative_num_draft_tokens must be all given or all omitted")
        if topk == 1 and ndt != steps + 1:
            self.warnings.append(self.strings["topk1_adjust"][0])
            ndt = steps + 1
        a.speculative_num_steps, a.speculative_eagle_topk = steps, topk
        a.speculative_num_draft_tokens = ndt
        #: SGLang takes the best ndt - 1 of the tree's candidates with torch.topk
        #: (srt/speculative/eagle_utils.py): more than the tree holds fails in the
        #: draft's first graph capture.
        bound = sg.max_draft_tokens(steps, topk)
        self.tree_error = None if ndt <= bound else (
            "RuntimeError: selected index k out of range (speculative_num_draft_tokens "
            f"{ndt} > topk + (num_steps - 1) * topk^2 + 1 = {bound})")
        self.spec = perf.SpecConfig(steps, topk, ndt, a.sim_acceptance)

    def _resolve_ngram(self) -> None:
        """srt/arg_groups/speculative_hook.py ``_handle_ngram``: SGLang resolves
        topk (the BFS breadth), draft tokens (12) and steps (draft tokens // topk)."""
        a = self.args
        self._max_running_default()
        a.speculative_eagle_topk = a.speculative_ngram_max_bfs_breadth
        if a.speculative_num_draft_tokens is None:
            a.speculative_num_draft_tokens = 12
            self.warnings.append(self.strings["ngram_draft_tokens"][0])
        if a.speculative_num_steps is None:
            a.speculative_num_steps = a.speculative_num_draft_tokens // a.speculative_eagle_topk
        self.warnings.append(self.strings["ngram_mixed_chunk"][0])
        ndt = a.speculative_num_draft_tokens
        # Performance model: the n-gram candidates as a chain over the draft tokens.
        self.spec = perf.SpecConfig(max(1, ndt - 1), 1, ndt, a.sim_acceptance)
