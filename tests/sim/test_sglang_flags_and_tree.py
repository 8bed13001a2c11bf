"""The simulator takes and refuses flags as SGLang 0.5.23 does, and its draft tree is bounded
as SGLang's is (topk + (num_steps - 1) * topk^2 + 1 draft tokens)."""

import subprocess
import sys

from specc.engines import sglang as sg

from .conftest import ROOT, SPEC_ARGS


def test_cuda_graph_max_bs_is_ambiguous_as_in_0_5_23():
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m",
                        "--cuda-graph-max-bs", "8"], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in r.stderr


def _with_tree(steps, topk, ndt):
    args = list(SPEC_ARGS)
    for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                        ("--speculative-num-draft-tokens", ndt)):
        args[args.index(flag) + 1] = str(value)
    return args


def test_a_tree_too_small_for_its_draft_tokens_dies_in_draft_graph_capture(start_sim):
    assert sg.max_draft_tokens(2, 2) == 7
    p = start_sim(*_with_tree(2, 2, 8), "--cuda-graph-max-bs-decode", "8")
    assert p.proc.wait(30) != 0
    log = p.log()
    assert "Capture draft decode CUDA graph begin" in log
    assert "RuntimeError: selected index k out of range" in log
    assert sg.READY_LINE not in log


def test_a_tree_within_the_bound_starts(start_sim):
    p = start_sim(*_with_tree(2, 2, 7))   # the old num_steps * topk + 1 rule refused it
    p.wait_ready()
    assert "selected index k out of range" not in p.log()
