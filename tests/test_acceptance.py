"""A point's acceptance length from the plan's recipe: counter differences (scope "run"),
else the server's own cumulative figure (scope "cumulative"), labelled as such."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from specc.plan import Acceptance, CounterRatio, ServerField
from specc.run.acceptance import AcceptanceReading, counter_ratio, prometheus_values

SGLANG = Acceptance(
    run=CounterRatio(path="/metrics", numerator="sglang:generation_tokens_total",
                     denominator="sglang:spec_verify_calls_total"),
    cumulative=ServerField(paths=("/server_info", "/get_server_info"),
                           field="internal_states.0.avg_spec_accept_length"))
VLLM = Acceptance(run=CounterRatio(path="/metrics",
                                   numerator="vllm:spec_decode_num_accepted_tokens_total",
                                   denominator="vllm:spec_decode_num_drafts_total", offset=1.0))


class FakeServer:
    """An httpx transport answering /metrics and /server_info from mutable state."""

    def __init__(self, metrics: dict, avg=None, metrics_status=200, info_paths=("/server_info",)):
        self.metrics, self.avg = metrics, avg
        self.metrics_status, self.info_paths = metrics_status, info_paths

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            text = "".join(f'# TYPE {k} counter\n{k}{{model_name="m"}} {v}\n'
                           for k, v in self.metrics.items())
            return httpx.Response(self.metrics_status, text=text)
        if request.url.path in self.info_paths:
            return httpx.Response(200, json={"internal_states": [{"avg_spec_accept_length": self.avg}]})
        return httpx.Response(404)


def _read(recipe, server: FakeServer, during=lambda: None):
    async def go():
        reading = AcceptanceReading(recipe)
        async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
            await reading.start(client, "http://s")
            during()
            return await reading.finish(client, "http://s")
    return asyncio.run(go())


def test_sglang_run_scoped_is_generated_tokens_per_verify_call_over_the_point():
    # since start: 1000 tokens in 400 verify calls; the point adds 900 tokens in 300 calls
    server = FakeServer({"sglang:generation_tokens_total": 1000,
                         "sglang:spec_verify_calls_total": 400}, avg=2.5)

    def point():
        server.metrics = {"sglang:generation_tokens_total": 1900,
                          "sglang:spec_verify_calls_total": 700}
        server.avg = 2.5      # the cumulative average lags (folded in every 40 iterations)
    assert _read(SGLANG, server, point) == (3.0, "run")


def test_a_counter_not_listed_yet_counts_as_zero():
    """A labelled Prometheus counter appears only once incremented."""
    server = FakeServer({"sglang:generation_tokens_total": 0})

    def point():
        server.metrics = {"sglang:generation_tokens_total": 250,
                          "sglang:spec_verify_calls_total": 100}
    assert _read(SGLANG, server, point) == (2.5, "run")


def test_without_counters_the_cumulative_figure_is_reported_as_such():
    server = FakeServer({}, avg=2.41, metrics_status=404, info_paths=("/get_server_info",))
    assert _read(SGLANG, server) == (2.41, "cumulative")
    # no verify calls during the point (nothing speculated): the fallback, labelled
    server = FakeServer({"sglang:generation_tokens_total": 5,
                         "sglang:spec_verify_calls_total": 2}, avg=2.5)
    assert _read(SGLANG, server) == (2.5, "cumulative")


def test_nothing_to_read_is_none_not_zero():
    assert _read(SGLANG, FakeServer({}, avg=0, metrics_status=404)) == (None, None)
    assert _read(None, FakeServer({})) == (None, None)


def test_vllm_is_one_plus_accepted_per_draft_over_the_point():
    server = FakeServer({"vllm:spec_decode_num_drafts_total": 100,
                         "vllm:spec_decode_num_accepted_tokens_total": 150})

    def point():
        server.metrics = {"vllm:spec_decode_num_drafts_total": 300,
                          "vllm:spec_decode_num_accepted_tokens_total": 450}
    assert _read(VLLM, server, point) == (2.5, "run")
    assert _read(VLLM, server) == (None, None)       # no drafts during the point


def test_counter_ratio_needs_both_reads():
    assert counter_ratio(VLLM.run, None, {"a": 1}) == (None, None)


def test_prometheus_text_sums_label_sets_and_skips_comments():
    text = ("# HELP vllm:spec_decode_num_drafts drafts\n"
            'vllm:spec_decode_num_drafts_total{model="m",engine="0"} 10\n'
            'vllm:spec_decode_num_drafts_total{model="m",engine="1"} 5\n'
            "sglang:generation_tokens_total 42.0\n")
    v = prometheus_values(text)
    assert v["vllm:spec_decode_num_drafts_total"] == 15
    assert v["sglang:generation_tokens_total"] == pytest.approx(42.0)
