"""Engine adapters: acceptance length from two snapshots, labelled with its scope."""

from __future__ import annotations

import pytest

from specc.engines import get_engine
from specc.engines.base import prometheus_values


def test_sglang_run_scoped_accept_length_is_generation_tokens_per_verify_call():
    # the run adds 900 tokens in 300 verify calls; the cumulative average (folded in only
    # every 40 decode iterations, warm-up included) says something else and is not used
    before = {"avg_spec_accept_length": 2.5, "generation_tokens_total": 1000,
              "spec_verify_calls_total": 400}
    after = {"avg_spec_accept_length": 1.4, "generation_tokens_total": 1900,
             "spec_verify_calls_total": 700}
    value, scope = get_engine("sglang").accept_length(before, after)
    assert scope == "run" and value == pytest.approx(3.0)


def test_sglang_accept_length_is_not_folded_from_the_cumulative_average():
    # the old formula (tokens / average, differenced) gave 3.09 where the truth was 1.22:
    # without the verify-call counter the figure is the cumulative one, labelled so
    before = {"avg_spec_accept_length": 2.9, "generation_tokens_total": 10000}
    after = {"avg_spec_accept_length": 2.7, "generation_tokens_total": 10122}
    assert get_engine("sglang").accept_length(before, after) == (2.7, "cumulative")


def test_sglang_snapshot_reads_the_counters_named_in_the_adapter():
    import asyncio

    from specc.engines import sglang as sg

    class R:
        def __init__(self, code, text="", js=None):
            self.status_code, self.text, self._js = code, text, js

        def json(self):
            return self._js

    class FakeClient:
        def __init__(self):
            self.paths = []

        async def get(self, url, timeout):
            path = url[len("http://x"):]
            self.paths.append(path)
            if path == "/metrics":
                return R(200, f'{sg.GENERATION_TOKENS_METRIC}{{is_streaming="true"}} 90\n'
                              f'{sg.GENERATION_TOKENS_METRIC}{{is_streaming="false"}} 10\n'
                              f"{sg.SPEC_VERIFY_CALLS_METRIC} 40\n")
            return R(200, js={"internal_states": [{"avg_spec_accept_length": 2.2}]})

    c = FakeClient()
    snap = asyncio.run(get_engine("sglang").accept_snapshot(c, "http://x"))
    assert snap == {"generation_tokens_total": 100.0, "spec_verify_calls_total": 40.0,
                    "avg_spec_accept_length": 2.2}
    assert c.paths == ["/metrics", "/server_info"]   # not the deprecated /get_server_info
    # releases before 0.5.13 have no verify-call counter
    assert get_engine("sglang", "0.5.9").spec_verify_metric is None


def test_sglang_without_the_counter_reports_the_cumulative_figure_as_such():
    value, scope = get_engine("sglang").accept_length({}, {"avg_spec_accept_length": 2.41})
    assert (value, scope) == (2.41, "cumulative")
    assert get_engine("sglang").accept_length({}, {}) == (None, None)


def test_vllm_accept_length_is_one_plus_accepted_per_draft_over_the_run():
    before = {"num_drafts": 100, "num_accepted_tokens": 150}
    after = {"num_drafts": 300, "num_accepted_tokens": 450}
    assert get_engine("vllm").accept_length(before, after) == (2.5, "run")
    assert get_engine("vllm").accept_length(before, before) == (None, None)


def test_prometheus_text_sums_label_sets_and_skips_comments():
    text = ("# HELP vllm:spec_decode_num_drafts drafts\n"
            'vllm:spec_decode_num_drafts_total{model="m",engine="0"} 10\n'
            'vllm:spec_decode_num_drafts_total{model="m",engine="1"} 5\n'
            "sglang:generation_tokens_total 42.0\n")
    v = prometheus_values(text)
    assert v["vllm:spec_decode_num_drafts_total"] == 15
    assert v["sglang:generation_tokens_total"] == 42.0


def test_vllm_snapshot_reads_the_total_suffixed_counters(tmp_path):
    import asyncio

    class FakeResponse:   # the shape of an httpx response, for vLLM's /metrics text
        status_code = 200
        text = ('vllm:spec_decode_num_drafts_total{model_name="m"} 300.0\n'
                'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 450.0\n')

    class FakeClient:
        async def get(self, url, timeout):
            assert url.endswith("/metrics")
            return FakeResponse()

    snap = asyncio.run(get_engine("vllm").accept_snapshot(FakeClient(), "http://x"))
    assert snap == {"num_drafts": 300.0, "num_accepted_tokens": 450.0}


# --- facts keyed by engine release ---------------------------------------------------

def test_versions_sort_as_releases_do():
    from specc.engines.base import for_version, parse_version

    assert parse_version("0.5.9") < parse_version("0.5.13") < parse_version("0.5.15")
    assert parse_version("0.5.15") < parse_version("0.5.15.post1") < parse_version("0.5.16")
    assert parse_version("0.33") == parse_version("0.33.0")
    table = [("0.5.14", "new"), ("0.5.0", "old")]
    assert [for_version(v, table) for v in ("0.5.23", "0.5.14", "0.5.13", "0.4.0")] == \
        ["new", "new", "old", "old"]
    with pytest.raises(ValueError):
        parse_version("latest")


def test_adapters_default_to_the_pinned_release():
    assert get_engine("sglang").version == "0.5.23"
    assert get_engine("sim").version == "0.5.23"
    assert get_engine("vllm").version == "0.33.0"
    assert get_engine("vllm", "0.16.0").version_note() is None
    assert "newer than 0.5.23" in get_engine("sglang", "0.5.24").version_note()


def test_sglang_cuda_graph_flag_per_release():
    # 0.5.23's parser rejects --cuda-graph-max-bs as ambiguous (-decode / -prefill)
    assert get_engine("sglang").cuda_graph_max_bs_flag == "--cuda-graph-max-bs-decode"
    assert get_engine("sglang", "0.5.13").cuda_graph_max_bs_flag == "--cuda-graph-max-bs"


def _markers(engine):
    return {m.name: m for m in engine.phase_markers()}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_every_phase_pattern_matches_the_lines_its_release_prints(version):
    import re

    for m in get_engine("sglang", version).phase_markers():
        assert m.samples, m.name
        begin, end = m.samples[0], m.samples[-1]
        assert any(re.search(p, begin) for p in m.begin), (version, m.name, begin)
        assert any(re.search(p, end) for p in m.end), (version, m.name, end)
    for m in get_engine("vllm").phase_markers():
        assert any(re.search(p, m.samples[0]) for p in m.begin), m.name


def test_sglang_0_5_23_phase_order_and_markers():
    names = [m.name for m in get_engine("sglang").phase_markers()]
    # both models' weights are one phase: the draft's "Load weight begin" follows the
    # target's and cannot be told from a later TP rank's target line
    assert names == ["load_weights", "kv_cache", "capture_cuda_graph",
                     "capture_draft_cuda_graph", "capture_draft_extend_cuda_graph", "warmup"]
    import re

    m = _markers(get_engine("sglang"))
    for name, line in [
            ("capture_cuda_graph", "Capture target verify CUDA graph begin. backend=full"),
            ("capture_cuda_graph", "Capture target decode CUDA graph begin. backend=full"),
            ("capture_draft_cuda_graph", "Capture draft decode CUDA graph begin. backend=full"),
            ("capture_draft_extend_cuda_graph", "Capture draft extend CUDA graph begin. x")]:
        assert any(re.search(p, line) for p in m[name].begin), (name, line)
    # the early-2026 strings are another release's, not 0.5.23's...
    assert not any(re.search(p, "Capture draft cuda graph begin. This can take")
                   for p in m["capture_draft_cuda_graph"].begin)
    # ...and that release's order had the draft's weights after the target's graphs
    old = [m.name for m in get_engine("sglang", "0.5.9").phase_markers()]
    assert old.index("load_draft_weights") > old.index("capture_cuda_graph")
    old_m = _markers(get_engine("sglang", "0.5.9"))
    assert any(re.search(p, "Capture draft extend cuda graph begin.")
               for p in old_m["capture_draft_extend_cuda_graph"].begin)


def test_readiness_phases_are_lists_of_patterns_in_the_plan(compose):
    from specc.compile.lower import _spec_for

    cfg = compose(["model_pair.context_length=2048", "speculation.num_steps=1",
                   "speculation.topk=1", "speculation.num_draft_tokens=2"])
    spec = _spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "speculation",
                                          "readiness")})
    r = get_engine("sglang").readiness(spec)
    names = [p["name"] for p in r["phases"]]
    assert "capture_draft_cuda_graph" not in names   # num_steps 1: no draft decode graph
    assert names[:3] == ["launch", "load_weights", "kv_cache"]
    assert all(isinstance(p["begin"], list) for p in r["phases"][1:])


def test_vllm_cache_flush_sets_dev_mode_in_the_server_env(compose):
    from specc.compile.lower import _spec_for

    cfg = compose(["engine=vllm", "model_pair.context_length=2048"])
    spec = _spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "speculation",
                                          "readiness")})
    env, _ = get_engine("vllm").env(spec, [0], flush_cache=True)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    env, _ = get_engine("vllm").env(spec, [0], flush_cache=False)
    assert "VLLM_SERVER_DEV_MODE" not in env
    env, _ = get_engine("sglang").env(spec, [0], flush_cache=True)
    assert "VLLM_SERVER_DEV_MODE" not in env
