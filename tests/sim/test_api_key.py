"""--api-key as SGLang 0.5.23 enforces it (srt/utils/auth.py, decide_request_auth): every
route needs `Authorization: Bearer <key>` except /health*, /ready*, /metrics* (probes and
Prometheus scraping) and OPTIONS; a refusal is 401 {"error": "Unauthorized"}."""

import httpx

from .conftest import SPEC_ARGS

KEY = "sk-test-" + "Qm9vYmFyYmF6cXV4MTIzNDU2Nzg5"


def test_the_simulator_enforces_api_key_as_sglang_0_5_23(start_sim):
    sim = start_sim(*SPEC_ARGS, "--api-key", KEY, "--enable-metrics")
    sim.wait_ready()   # /health is open
    good = {"Authorization": f"Bearer {KEY}"}
    for path in ("/server_info", "/v1/models", "/model_info"):
        r = httpx.get(sim.url + path)
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}, path
        assert httpx.get(sim.url + path, headers={"Authorization": "Bearer nope"}) \
            .status_code == 401
        assert httpx.get(sim.url + path, headers=good).status_code == 200, path
    assert httpx.post(sim.url + "/flush_cache").status_code == 401
    for path in ("/health", "/health_generate", "/metrics"):
        assert httpx.get(sim.url + path, timeout=30).status_code == 200, path
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    assert httpx.post(sim.url + "/generate", json=body).status_code == 401
    assert httpx.post(sim.url + "/generate", json=body, headers=good).status_code == 200
