"""Command line of ``python -m specc.sim``: SGLang's launch_server flags + ``--sim-*``.

SGLang flags keep SGLang's names, types and defaults (``server_args.py``,
0.5.x); unknown flags are rejected by argparse ("error: unrecognized
arguments", exit 2), as SGLang's own parser does.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from specc.compile.facts import read_config_json as read_model_config

from specc.perf import model as perf


FAULT_ENV = "SPECC_SIM_FAULT"
TRUTH_ENV = "SPECC_SIM_TRUTH"

STARTUP_PHASES = ("load_weights", "kv_cache", "capture_cuda_graph", "load_draft_weights",
                  "capture_draft_cuda_graph", "capture_draft_extend_cuda_graph", "warmup")
#: fault name -> (needs a phase, takes a number, help)
FAULTS: dict[str, tuple[bool, bool, str]] = {
    "hang": (True, False, "log the phase's begin line, then hang forever with the process "
                          "alive (the zombie); startup phases never open the port"),
    "crash": (True, False, "print SGLang's failure signature (Scheduler hit an exception: "
                           "Traceback ... RuntimeError) in the phase and exit 1"),
    "health_503_forever": (False, False, "/health and /health_generate answer 503 forever"),
    "health_flap": (False, False, "after ready, health alternates 200/503 on successive calls"),
    "health_after": (False, True, "health answers 503 until N s (default 30) after ready"),
    "die_mid_run": (False, True, "os._exit(1) after N generated tokens (default: ~1 s of "
                                 "generation)"),
    "hang_mid_run": (False, True, "the scheduler wedges after N generated tokens (default: "
                                  "~1 s of generation): no tokens, no log lines, health still 200"),
    "truncate_stream": (False, True, "every streaming response closes the connection after N "
                                     "tokens (default half of max tokens), without [DONE]"),
}


@dataclass(frozen=True)
class Fault:
    name: str
    phase: str | None = None
    arg: float | None = None

    def __str__(self) -> str:
        s = self.name + (f"@{self.phase}" if self.phase else "")
        return s + (f":{self.arg:g}" if self.arg is not None else "")


class FaultError(ValueError):
    pass


def parse_fault(spec: str | None) -> Fault | None:
    """``<fault>[@<phase>][:<number>]`` -> Fault; raises FaultError when invalid."""
    if spec is None or not spec.strip():
        return None
    spec = spec.strip()
    arg = None
    if ":" in spec:
        spec, num = spec.rsplit(":", 1)
        try:
            arg = float(num)
        except ValueError:
            raise FaultError(f"fault argument {num!r} is not a number") from None
    name, _, phase = spec.partition("@")
    if name not in FAULTS:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    needs_phase, takes_num, _ = FAULTS[name]
    if needs_phase and phase not in STARTUP_PHASES:
        raise FaultError(f"fault {name!r} needs @<phase>, one of: {', '.join(STARTUP_PHASES)}")
    if not needs_phase and phase:
        raise FaultError(f"fault {name!r} takes no @phase")
    if arg is not None and not takes_num:
        raise FaultError(f"fault {name!r} takes no :number")
    return Fault(name, phase or None, arg)


def _fault_help() -> str:
    lines = ["faults (--sim-fault or $SPECC_SIM_FAULT; the flag wins when both are set):",
             "  syntax <fault>[@<phase>][:<number>]"]
    for name, (ph, num, text) in FAULTS.items():
        sig = name + ("@<phase>" if ph else "") + (":N" if num else "")
        lines.append(f"  {sig:<26} {text}")
    lines.append("  phases: " + ", ".join(STARTUP_PHASES))
    lines.append("")
    lines.append(f"ground truth: ${TRUTH_ENV}=<path> appends JSON lines (ready, token events).")
    return "\n".join(lines)


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
        epilog=_fault_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    # --- SGLang (server_args.py) -------------------------------------------
    a("--model-path", "--model", type=str, required=True)
    a("--tokenizer-path", type=str, default=None)
    a("--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size")
    a("--dp-size", "--data-parallel-size", type=int, default=1, dest="dp_size")
    a("--pp-size", "--pipeline-parallel-size", type=int, default=1, dest="pp_size")
    a("--ep-size", "--expert-parallel-size", type=int, default=1, dest="ep_size")
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--mem-fraction-static", type=float, default=None)
    a("--context-length", type=int, default=None)
    a("--trust-remote-code", action="store_true")
    # 0.5.23: --cuda-graph-max-bs is gone, an ambiguous prefix of these two (argparse refuses it)
    a("--cuda-graph-max-bs-decode", type=int, default=None, dest="cuda_graph_max_bs")
    a("--cuda-graph-max-bs-prefill", type=int, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--served-model-name", type=str, default=None)
    a("--attention-backend", type=str, default=None)
    a("--log-level", type=str, default="info")
    a("--enable-metrics", action="store_true")
    a("--disable-cuda-graph", action="store_true")
    a("--dtype", type=str, default="auto")
    a("--kv-cache-dtype", type=str, default="auto")
    a("--quantization", type=str, default=None)
    a("--page-size", type=int, default=None)
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
    # --- simulator only ------------------------------------------------------
    s = p.add_argument_group("simulator")
    s.add_argument("--sim-time-scale", type=float, default=0.01,
                   help="multiplies the realistic startup phase durations "
                        "(specc.engines.sglang.estimate_phase_seconds); 1.0 = realistic "
                        "minutes; default 0.01. Token timing is always real time.")
    s.add_argument("--sim-seed", type=int, default=0, help="seed of all randomness (default 0)")
    s.add_argument("--sim-fault", type=str, default=None,
                   help="fault to inject, see below; wins over $SPECC_SIM_FAULT")
    s.add_argument("--sim-acceptance", type=float, default=perf.DEFAULT_ACCEPTANCE,
                   help="per-position draft acceptance probability a (default 0.7: a 3-step "
                        "chain then accepts (1-a^4)/(1-a) = 2.53 tokens/step, within the "
                        "2-3 range EAGLE-3 papers and SGLang logs report on chat data)")
    s.add_argument("--sim-target-facts", type=_json_obj, default=None, metavar="JSON",
                   help="config.json-style facts of the target (+ weight_gb, active_params_b) "
                        "used where --model-path has no readable config.json")
    s.add_argument("--sim-draft-facts", type=_json_obj, default=None, metavar="JSON",
                   help="same for --speculative-draft-model-path")
    return p


# --- model facts ------------------------------------------------------------
#: Fallback target when neither config.json nor --sim-target-facts exist: a
#: Llama-3.1-8B-shaped dense model in BF16 (engines.md model table).
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
    """config.json at a model directory (or the file itself); text_config flattened."""
    found = read_model_config(path) if path else None
    if found is None:
        return None
    data = found[0]
    text = data.get("text_config")
    if isinstance(text, dict):
        merged = dict(text)
        # The wrapper's architecture is what SGLang dispatches on.
        if data.get("architectures"):
            merged["architectures"] = data["architectures"]
            merged["text_architectures"] = text.get("architectures")
        return merged
    return dict(data)   # the reader caches: never hand out its dict


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


def fault_from(args: argparse.Namespace, environ: dict | None = None) -> Fault | None:
    environ = os.environ if environ is None else environ
    spec = args.sim_fault if args.sim_fault else environ.get(FAULT_ENV)
    return parse_fault(spec)
