"""Startup order, readiness sequence, startup rules, faults, signals, determinism."""

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from specc.engines import sglang as sg

from .conftest import ROOT, SPEC_ARGS

SMALL = ["--sim-target-facts", json.dumps({"weight_gb": 0.3, "num_hidden_layers": 2,
                                           "max_position_embeddings": 262144})]
KIMI_CFG = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {
    "architectures": ["DeepseekV3ForCausalLM"], "max_position_embeddings": 262144,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    "num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840}}


def probe(url: str) -> str:
    try:
        return str(httpx.get(url + "/health", timeout=1).status_code)
    except httpx.ConnectError:
        return "refused"


def test_refused_then_503_then_200(start_sim):
    p = start_sim("--model-path", "m", "--sim-time-scale", "0.3", *SMALL)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = probe(p.url)
        if not seen or seen[-1] != s:
            seen.append(s)
        if s == "200":
            break
        time.sleep(0.02)
    assert seen == ["refused", "503", "200"], seen
    log = p.log()
    # /get_model_info answered during warm-up is not readiness; ready line was logged
    assert sg.READY_LINE in log


def test_startup_log_order_and_format(start_sim):
    p = start_sim(*SPEC_ARGS)
    p.wait_ready()
    log = p.log()
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Load weight begin\. avail mem=",
                     log, re.M)
    # SGLang 0.5.23's order and strings: both models' weights, then the KV pools, then graphs
    markers = ["Load weight begin", "Load weight end", "Load weight begin", "Load weight end",
               "KV Cache is allocated", "Memory pool end",
               "Capture target verify CUDA graph begin", "Capture target verify CUDA graph end",
               "Capture draft decode CUDA graph begin", "Capture draft decode CUDA graph end",
               "Capture draft extend CUDA graph begin", "Capture draft extend CUDA graph end",
               "INFO:     Application startup complete.",
               "INFO:     Uvicorn running on http://127.0.0.1:", sg.READY_LINE]
    pos = 0
    for m in markers:
        i = log.find(m, pos)
        assert i >= 0, f"{m!r} missing or out of order"
        pos = i + 1
    for m in sg.phase_markers():   # every begin/end pattern of 0.5.23 matches a line printed
        assert any(re.search(p, log) for p in m.begin) and any(re.search(p, log) for p in m.end)
    for r in (0, 1):
        assert f"TP{r}] Capture draft extend CUDA graph end. elapsed=" in log


def test_topk1_rewrite_and_default_max_running(start_sim):
    args = [a if a != "4" else "3" for a in SPEC_ARGS]   # num_draft_tokens 3
    p = start_sim(*args)
    p.wait_ready()
    log = p.log()
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in log
    assert "Max running requests is reset to 48" in log
    info = httpx.get(p.url + "/get_server_info").json()
    assert info["speculative_num_draft_tokens"] == 4 and info["max_running_requests"] == 48


def test_default_spec_params_from_architecture(start_sim, tmp_path):
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps(KIMI_CFG))
    p = start_sim("--model-path", str(tmp_path / "kimi"), "--speculative-algorithm", "EAGLE3",
                  "--sim-draft-facts", json.dumps({"max_position_embeddings": 262144}),
                  "--sim-target-facts", json.dumps({"weight_gb": 1.0}))
    p.wait_ready()
    info = httpx.get(p.url + "/get_server_info").json()
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == sg.default_spec_params("KimiK25")


def _mismatch_dirs(tmp_path):
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps(KIMI_CFG))
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 131072,
         "num_hidden_layers": 1}))
    return ["--model-path", str(tmp_path / "kimi"), "--tp-size", "8",
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(tmp_path / "draft"),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--sim-time-scale", "0.001",
            "--sim-target-facts", json.dumps({"weight_gb": 554, "active_params_b": 32})]


def test_context_mismatch_dies(start_sim, tmp_path):
    p = start_sim(*_mismatch_dirs(tmp_path))
    t0 = time.monotonic()
    rc = p.proc.wait(30)
    assert rc != 0
    log = p.log()
    assert "ValueError: " + sg.context_mismatch_message(262144, 131072) in log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "TP7] Load weight end." in log            # after the target's weights...
    assert "Capture target" not in log                # ...before any graph (0.5.23's order)
    assert sg.READY_LINE not in log
    assert probe(p.url) == "refused"


def test_context_mismatch_env_override(start_sim, tmp_path):
    p = start_sim(*_mismatch_dirs(tmp_path), env={sg.ALLOW_LONGER_CONTEXT_ENV: "1"})
    p.wait_ready()
    assert "Overriding the draft model's max_position_embeddings to 262144." in p.log()


def test_context_length_flag_avoids_mismatch(start_sim, tmp_path):
    p = start_sim(*_mismatch_dirs(tmp_path), "--context-length", "131072")
    p.wait_ready()
    assert "ValueError" not in p.log()


def test_unknown_flag_exit_2():
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m", "--bogus-flag", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "error: unrecognized arguments: --bogus-flag" in r.stderr
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m", "--tp-size", "x"],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "invalid int value" in r.stderr


def test_unknown_fault_exit_2():
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m", "--sim-fault",
                        "explode"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown fault 'explode'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30,
                       env={"SPECC_SIM_FAULT": "hang@nowhere", "PATH": "/usr/bin"})
    assert r.returncode == 2 and "needs @<phase>" in r.stderr


def test_help_lists_faults():
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    for name in ("hang@<phase>", "crash@<phase>", "health_503_forever", "health_flap",
                 "health_after", "die_mid_run", "truncate_stream", "--sim-time-scale"):
        assert name in r.stdout


# --- faults --------------------------------------------------------------------------
def test_hang_zombie_and_sigterm(start_sim):
    p = start_sim(*SPEC_ARGS, env={"SPECC_SIM_FAULT": "hang@capture_draft_cuda_graph"})
    p.wait_log("TP1] Capture draft decode CUDA graph begin.")
    time.sleep(0.5)
    assert p.proc.poll() is None
    assert "Capture draft decode CUDA graph end" not in p.log()
    assert probe(p.url) == "refused"
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(5)
    assert time.monotonic() - t0 < 1.0


def test_hang_in_warmup_port_open_health_503(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "hang@warmup")
    p.wait_log("Uvicorn running on")
    time.sleep(0.3)
    assert probe(p.url) == "503"
    assert httpx.get(p.url + "/get_model_info").status_code == 200
    assert sg.READY_LINE not in p.log()


def test_fault_flag_wins_over_env(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "crash@kv_cache",
                  env={"SPECC_SIM_FAULT": "hang@load_weights"})
    assert p.proc.wait(20) != 0
    assert "KV Cache is allocated" in p.log()


@pytest.mark.parametrize("phase", ["load_weights", "capture_draft_extend_cuda_graph"])
def test_crash(start_sim, phase):
    p = start_sim(*SPEC_ARGS, env={"SPECC_SIM_FAULT": f"crash@{phase}"})
    rc = p.proc.wait(20)
    log = p.log()
    assert rc == 1
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "RuntimeError: " in log
    assert sg.READY_LINE not in log


def test_health_503_forever(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "health_503_forever")
    p.wait_log(sg.READY_LINE)
    codes = {probe(p.url) for _ in range(5)}
    assert codes == {"503"}
    assert httpx.get(p.url + "/v1/models").status_code == 200
    assert httpx.post(p.url + "/generate", json={"text": "a"}).status_code == 200


def test_health_flap(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "health_flap")
    p.wait_log(sg.READY_LINE)
    codes = [probe(p.url) for _ in range(6)]
    assert set(codes) == {"200", "503"}
    assert all(a != b for a, b in zip(codes, codes[1:]))


def test_health_after(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "health_after:1.0")
    p.wait_log(sg.READY_LINE)
    assert probe(p.url) == "503"
    time.sleep(1.1)
    assert probe(p.url) == "200"


def test_die_mid_run(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "die_mid_run:20")
    p.wait_ready()
    with pytest.raises(httpx.HTTPError):
        with httpx.stream("POST", p.url + "/generate", json={
                "text": "a", "stream": True,
                "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}) as r:
            for _ in r.iter_lines():
                pass
    assert p.proc.wait(5) != 0


def test_die_mid_run_default_after_a_second(start_sim):
    p = start_sim("--model-path", "m", env={"SPECC_SIM_FAULT": "die_mid_run"})
    p.wait_ready()
    t0 = time.monotonic()
    with pytest.raises(httpx.HTTPError):
        httpx.post(p.url + "/generate", json={
            "text": "a", "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}, timeout=10)
    assert 0.8 < time.monotonic() - t0 < 3
    assert p.proc.wait(5) != 0


def test_truncate_stream(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "truncate_stream:5")
    p.wait_ready()
    lines = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", p.url + "/v1/completions", json={
                "prompt": "a", "max_tokens": 50, "stream": True, "ignore_eos": True}) as r:
            for line in r.iter_lines():
                lines.append(line)
    assert lines and "data: [DONE]" not in lines
    assert p.proc.poll() is None                        # the server survives
    assert httpx.post(p.url + "/generate", json={"text": "b"}).status_code == 200


# --- signals ----------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_with_open_streams(start_sim, sig):
    import threading

    p = start_sim("--model-path", "m")
    p.wait_ready()

    def stream():
        try:
            with httpx.stream("POST", p.url + "/generate", json={
                    "text": "a", "stream": True,
                    "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}},
                    timeout=10) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
    threads = [threading.Thread(target=stream, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    p.proc.send_signal(sig)
    p.proc.wait(5)
    assert time.monotonic() - t0 < 1.0


# --- determinism and ground truth --------------------------------------------------------
def _run_and_collect(start_sim, tmp_path, seed: int, name: str):
    truth = tmp_path / f"{name}.jsonl"
    p = start_sim(*SPEC_ARGS, "--sim-seed", str(seed), env={"SPECC_SIM_TRUTH": str(truth)})
    p.wait_ready()
    out = []
    for prompt in ("alpha beta", "gamma delta epsilon"):
        with httpx.stream("POST", p.url + "/generate", json={
                "text": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}) as r:
            counts = [json.loads(l[6:])["meta_info"]["completion_tokens"]
                      for l in r.iter_lines() if l.startswith("data: {")]
        final = httpx.post(p.url + "/generate", json={
            "text": prompt, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}).json()
        out.append((counts, final["text"], final["meta_info"]["spec_verify_ct"]))
    acc = httpx.get(p.url + "/get_server_info").json()["internal_states"][0]["avg_spec_accept_length"]
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(5)
    return out, acc, truth


def test_determinism_under_seed_and_truth(start_sim, tmp_path):
    a, acc_a, truth = _run_and_collect(start_sim, tmp_path, 7, "a")
    b, acc_b, _ = _run_and_collect(start_sim, tmp_path, 7, "b")
    c, _, _ = _run_and_collect(start_sim, tmp_path, 8, "c")
    assert a == b and acc_a == acc_b
    assert a != c
    events = [json.loads(l) for l in truth.read_text().splitlines()]
    ready = [e for e in events if e["event"] == "ready"]
    assert len(ready) == 1 and isinstance(ready[0]["t"], float)
    toks = [e for e in events if e["event"] == "token"]
    assert toks and all(e["t"] >= ready[0]["t"] for e in toks)
    by_rid = {}
    for e in toks:
        by_rid.setdefault(e["rid"], []).append(e)
    for rid, evs in by_rid.items():
        assert sum(e["n"] for e in evs) == 40
        assert [e["first"] for e in evs] == [True] + [False] * (len(evs) - 1)
        assert all(abs(e["t"] - e["due"]) < 0.05 for e in evs)
