"""Every line the simulator prints for 0.5.23 is one of the strings committed in
specc/sim/versions.py (copied from the 0.5.23 wheel, each with its source file);
with the wheel at hand, each string's literal pieces are found in that file."""

import glob
import os
import re

import httpx
import pytest

from specc.sim import versions

from .conftest import SPEC_ARGS
from .test_lifecycle import _mismatch_dirs

PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] ")
SIM_ONLY = ("specc.sim: fault injected: ",)


def messages(log: str) -> list[str]:
    """Log records: a line with SGLang's prefix starts one; other lines continue it."""
    out: list[str] = []
    for line in log.splitlines():
        m = PREFIX.match(line)
        if m:
            out.append(line[m.end():])
        elif out and line:
            out[-1] += "\n" + line
    return out


def unknown(log: str, version: str = "0.5.23") -> list[str]:
    pats = [versions.template_regex(t) for t, _ in versions.VERSIONS[version].values()]
    return [m for m in messages(log)
            if not m.startswith(SIM_ONLY) and not any(p.match(m) for p in pats)]


def test_every_logged_line_is_a_committed_0_5_23_string(start_sim, tmp_path):
    p = start_sim(*SPEC_ARGS, "--enable-metrics")
    p.wait_ready()
    httpx.post(p.url + "/generate", json={"text": "a b", "sampling_params": {
        "max_new_tokens": 150, "ignore_eos": True}}, timeout=30)
    for path in ("/get_server_info", "/get_model_info", "/server_info", "/health_generate"):
        assert httpx.get(p.url + path, timeout=30).status_code == 200
    crash = start_sim(*_mismatch_dirs(tmp_path))
    crash.proc.wait(30)
    faulty = start_sim("--model-path", "m", "--sim-fault", "crash@kv_cache")
    faulty.proc.wait(30)
    logs = p.log() + crash.log() + faulty.log()
    for needle in ("Decode batch, ", "Prefill batch, ", "is deprecated", "ValueError: ",
                   "Scheduler hit an exception", "Received sigquit", "ready to roll"):
        assert needle in logs                      # the check covered these paths
    assert unknown(logs) == []


def test_an_unlisted_string_is_caught():
    assert unknown("[2026-11-30 10:00:00 TP0] Capture cuda graph begin. avail mem=1.00 GB\n")
    assert not unknown("[2026-11-30 10:00:00] The server is fired up and ready to roll!\n")


def test_every_version_has_the_same_keys_and_sources():
    keys = set(versions.VERSIONS[versions.DEFAULT])
    for name, table in versions.VERSIONS.items():
        # 0.5.23 only: prefill graphs (captured by default on CUDA since 0.5.14's BCG)
        assert set(table) >= keys - {"target_graph_bs", "prefill_graph_begin",
                                     "prefill_graph_end"}, name
        for key, (template, source) in table.items():
            assert template and source, (name, key)
            assert versions.literal_fragments(template), (name, key)


WHEEL = os.environ.get("SPECC_SGLANG_WHEEL") or next(
    iter(glob.glob("/tmp/sgl/sglang-0.5.23-*.whl")), None)


@pytest.mark.skipif(not WHEEL, reason="no sglang 0.5.23 wheel (set SPECC_SGLANG_WHEEL)")
def test_strings_are_in_the_released_wheel():
    from .drift import missing

    assert missing(WHEEL) == []
