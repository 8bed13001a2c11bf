"""Faults (``--sim-fault`` / ``$SPECC_SIM_FAULT``) and the ground-truth switch: the test hooks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .versions import FAULT_PHASES

FAULT_ENV = "SPECC_SIM_FAULT"
TRUTH_ENV = "SPECC_SIM_TRUTH"

#: Phases a fault may name (the contract's names plus the 0.5.23 ones; see versions.py).
STARTUP_PHASES = FAULT_PHASES
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
                                  "~1 s of generation): no tokens, no log lines; the health "
                                  "check (a generation in 0.5.23) answers 503 after "
                                  "$SGLANG_HEALTH_CHECK_TIMEOUT"),
    "stall_mid_run": (False, True, "the process stops for 0.3 s (its CPU taken away) every N "
                                   "generated tokens (default: every ~1 s of generation): "
                                   "those steps are delivered late, the schedule kept"),
    "slow_http": (False, True, "the HTTP side takes N s (default 0.05) per generation "
                               "request before queueing it, one at a time (a parser starved "
                               "of CPU); steps still admit requests by when their bytes "
                               "arrived, and wait for them"),
    "echo_auth": (False, False, "generation routes answer 401 with the Authorization header "
                                "they were sent in the body (a leaky gateway)"),
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


def fault_help() -> str:
    """The faults and the ground-truth hook, for `python -m specc.sim --help`."""
    lines = ["faults (--sim-fault or $SPECC_SIM_FAULT; the flag wins when both are set):",
             "  syntax <fault>[@<phase>][:<number>]"]
    for name, (ph, num, text) in FAULTS.items():
        sig = name + ("@<phase>" if ph else "") + (":N" if num else "")
        lines.append(f"  {sig:<26} {text}")
    lines.append("  phases: " + ", ".join(STARTUP_PHASES))
    lines.append("  (capture_cuda_graph = the target's graph capture, decode or verify; "
                 "capture_draft_cuda_graph = capture_draft_decode_cuda_graph)")
    lines.append("")
    lines.append(f"ground truth: ${TRUTH_ENV}=<path> appends JSON lines (ready, token events).")
    return "\n".join(lines)


def fault_from(args, environ: Mapping[str, str] | None = None) -> Fault | None:
    environ = os.environ if environ is None else environ
    spec = args.sim_fault if args.sim_fault else environ.get(FAULT_ENV)
    return parse_fault(spec)
