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

from .conftest import ROOT, SPEC_ARGS, free_port

SMALL = ["--sim-target-facts", json.dumps({"weight_gb": 0.3, "num_hidden_layers": 2,
                                           "max_position_embeddings": 262144})]
KIMI_CFG = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {
    "architectures": ["DeepseekV3ForCausalLM"], "max_position_embeddings": 262144,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    "num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840}}


def probe(url: str) -> str:
    # 0.5.23's /health runs a generation and answers after >= 1 s once serving
    try:
        return str(httpx.get(url + "/health", timeout=30).status_code)
    except httpx.ConnectError:
        return "refused"


def truth_phases(path) -> list[str]:
    return [e["phase"] for e in map(json.loads, path.read_text().splitlines())
            if e["event"] == "phase"]


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


def _in_order(log: str, markers: list[str]) -> None:
    pos = 0
    for m in markers:
        i = log.find(m, pos)
        assert i >= 0, f"{m!r} missing or out of order"
        pos = i + 1


def test_startup_log_order_and_format(start_sim, tmp_path):
    """0.5.23: target weights, draft weights, KV cache, target VERIFY graph (speculation),
    draft decode graph, draft extend graph, uvicorn, ready; draft graphs on rank 0 only."""
    truth = tmp_path / "t.jsonl"
    p = start_sim(*SPEC_ARGS, env={"SPECC_SIM_TRUTH": str(truth)})
    p.wait_ready()
    log = p.log()
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Load weight begin\. avail mem=",
                     log, re.M)
    _in_order(log, ["Load weight begin", "Load weight end. elapsed=", "type=LlamaForCausalLM,",
                    "Load weight begin", "type=LlamaForCausalLMEagle3,",
                    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ", "Memory pool end",
                    "TP0] Capture target prefill CUDA graph begin. backend=breakable",
                    "TP1] Capture target prefill CUDA graph end.",
                    "TP0] Capture target verify CUDA graph begin. backend=",
                    "TP1] Capture target verify CUDA graph end. bs=",
                    "TP1] Capture draft prefill CUDA graph begin. backend=breakable",
                    "TP0] Capture draft decode CUDA graph begin.",
                    "TP0] Capture draft decode CUDA graph end. elapsed=",
                    "TP0] Capture draft extend CUDA graph begin.",
                    "TP0] Capture draft extend CUDA graph end. elapsed=",
                    "] INFO:     Application startup complete.",
                    "] INFO:     Uvicorn running on http://127.0.0.1:", sg.READY_LINE])
    assert "Capture target decode CUDA graph" not in log      # verify replaces it
    assert "TP1] Capture draft decode" not in log             # log_info_on_rank0
    assert "TP1] Capture draft extend" not in log
    assert "dtype=torch" not in log                           # 0.5.23 dropped it
    assert truth_phases(truth) == ["load_weights", "load_draft_weights", "kv_cache",
                                   "target_graph", "capture_draft_decode_cuda_graph",
                                   "capture_draft_extend_cuda_graph", "warmup"]


def test_baseline_captures_target_decode_graph_without_rank_prefix(start_sim):
    p = start_sim("--model-path", "m")
    p.wait_ready()
    log = p.log()
    _in_order(log, ["] Load weight begin", "] KV Cache is allocated", "] Memory pool end",
                    "] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=",
                    "] Capture target prefill CUDA graph end.",
                    "] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1",
                    "] Capture target decode CUDA graph end.", sg.READY_LINE])
    # 0.5.23 on CUDA: the prefill graph (breakable by default), then the decode graph only
    assert "CUDA graph begin" not in log.replace("Capture target decode CUDA graph begin", "") \
        .replace("Capture target prefill CUDA graph begin", "")
    assert " TP0]" not in log and "Load weight begin" in log


def test_early_2026_version_strings_and_order(start_sim):
    p = start_sim(*SPEC_ARGS, "--sim-version", "early-2026")
    p.wait_ready()
    log = p.log()
    _in_order(log, ["Load weight begin", "KV Cache is allocated. #tokens: ", "Memory pool end",
                    "TP0] Capture cuda graph begin. This can take up to several minutes.",
                    "Capture cuda graph end. Time elapsed: ", "Load weight begin",
                    "TP1] Capture draft cuda graph begin.", "Capture draft extend cuda graph end.",
                    sg.READY_LINE])
    assert "CUDA graph" not in log
    info = httpx.get(p.url + "/server_info").json()
    assert info["version"] == "early-2026"


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
    info = httpx.get(p.url + "/server_info").json()
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
    """0.5.23: the draft worker is built right after the target's weights, before the
    KV cache and any graph capture; order from the log and $SPECC_SIM_TRUTH, no clock."""
    truth = tmp_path / "t.jsonl"
    p = start_sim(*_mismatch_dirs(tmp_path), env={"SPECC_SIM_TRUTH": str(truth)})
    rc = p.proc.wait(30)
    assert rc != 0
    log = p.log()
    assert "ValueError: " + sg.context_mismatch_message(262144, 131072) in log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    _in_order(log, ["TP7] Load weight end.", "Scheduler hit an exception",
                    "Received sigquit from a child process"])
    assert "KV Cache is allocated" not in log and "Capture" not in log
    assert sg.READY_LINE not in log
    assert truth_phases(truth) == ["load_weights", "load_draft_weights"]
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
    p.wait_log("TP0] Capture draft decode CUDA graph begin.")
    assert p.proc.poll() is None
    assert "Capture draft decode CUDA graph end" not in p.log()
    assert probe(p.url) == "refused"
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(30) == 0


@pytest.mark.parametrize("phase,begin,done", [
    ("capture_cuda_graph", "Capture target verify CUDA graph begin",
     "Capture target verify CUDA graph end"),
    ("capture_target_verify_cuda_graph", "Capture target verify CUDA graph begin",
     "Capture target verify CUDA graph end"),
    ("capture_draft_decode_cuda_graph", "Capture draft decode CUDA graph begin",
     "Capture draft decode CUDA graph end"),
    ("load_draft_weights", "type=LlamaForCausalLM,", "type=LlamaForCausalLMEagle3"),
])
def test_fault_phase_names_and_aliases(start_sim, tmp_path, phase, begin, done):
    truth = tmp_path / "t.jsonl"
    p = start_sim(*SPEC_ARGS, env={"SPECC_SIM_FAULT": f"hang@{phase}",
                                   "SPECC_SIM_TRUTH": str(truth)})
    p.wait_log(begin)
    assert p.proc.poll() is None and done not in p.log()
    assert truth_phases(truth)[-1] == {"capture_cuda_graph": "target_graph",
                                       "capture_target_verify_cuda_graph": "target_graph"
                                       }.get(phase, phase)


def test_hang_in_warmup_port_open_health_503(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "hang@warmup")
    p.wait_log("Uvicorn running on")
    assert probe(p.url) == "503"
    assert httpx.get(p.url + "/model_info").status_code == 200
    assert sg.READY_LINE not in p.log()


def test_fault_flag_wins_over_env(start_sim):
    p = start_sim("--model-path", "m", "--sim-fault", "crash@kv_cache",
                  env={"SPECC_SIM_FAULT": "hang@load_weights"})
    assert p.proc.wait(60) != 0
    assert "KV Cache is allocated" in p.log()


@pytest.mark.parametrize("phase", ["load_weights", "capture_draft_extend_cuda_graph"])
def test_crash(start_sim, phase):
    p = start_sim(*SPEC_ARGS, env={"SPECC_SIM_FAULT": f"crash@{phase}"})
    rc = p.proc.wait(60)
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
    """503 until N s after ready, then 200 for good. Probed until it turns (no guessed
    sleep); what each probe must answer follows from when it ran: one answered before the
    process was N s old is 503, one sent N s after the ready line showed is 200."""
    wait = 3.0
    started = time.monotonic()
    p = start_sim("--model-path", "m", "--sim-fault", f"health_after:{wait}")
    p.wait_log(sg.READY_LINE)
    ready_seen = time.monotonic()
    answers = []   # (sent, answered, status)
    while time.monotonic() < ready_seen + wait + 60:
        sent = time.monotonic()
        status = probe(p.url)
        answers.append((sent, time.monotonic(), status))
        if status == "200":
            break
        time.sleep(0.05)
    statuses = [s for _, _, s in answers]
    assert statuses[-1] == "200" and set(statuses[:-1]) <= {"503"}, statuses
    assert statuses[0] == "503", "the first probe after the ready line was already healthy"
    for sent, answered, status in answers:
        if answered < started + wait:
            assert status == "503", answers
        if sent > ready_seen + wait:
            assert status == "200", answers
    assert answers[-1][1] >= started + wait   # never healthy before its N s
    for _ in range(3):   # and it stays healthy
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
    assert p.proc.wait(30) != 0


def test_die_mid_run_default_after_a_second(start_sim, tmp_path):
    truth = tmp_path / "t.jsonl"
    p = start_sim("--model-path", "m", env={"SPECC_SIM_FAULT": "die_mid_run",
                                            "SPECC_SIM_TRUTH": str(truth)})
    p.wait_ready()
    with pytest.raises(httpx.HTTPError):
        httpx.post(p.url + "/generate", json={
            "text": "a", "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}, timeout=10)
    assert p.proc.wait(30) != 0
    events = [json.loads(ln) for ln in truth.read_text().splitlines()]
    tokens = [e for e in events if e["event"] == "token"]
    assert tokens and sum(e["n"] for e in tokens) < 5000   # generated for a while, then died
    assert "Received sigquit from a child process" in p.log()


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
    streaming = threading.Semaphore(0)

    def stream():
        try:
            with httpx.stream("POST", p.url + "/generate", json={
                    "text": "a", "stream": True,
                    "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}},
                    timeout=60) as r:
                first = True
                for _ in r.iter_lines():
                    if first:   # this stream is open and generating
                        streaming.release()
                        first = False
        except httpx.HTTPError:
            pass
    threads = [threading.Thread(target=stream, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    assert streaming.acquire(timeout=60) and all(streaming.acquire(timeout=60) for _ in range(3)), \
        "the streams never delivered a token"
    p.proc.send_signal(sig)
    assert p.proc.wait(30) == 0


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
            counts = [json.loads(ln[6:])["meta_info"]["completion_tokens"]
                      for ln in r.iter_lines() if ln.startswith("data: {")]
        final = httpx.post(p.url + "/generate", json={
            "text": prompt, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}).json()
        out.append((counts, final["text"], final["meta_info"]["spec_verify_ct"]))
    acc = httpx.get(p.url + "/server_info").json()["internal_states"][0].get("avg_spec_accept_length")
    p.proc.send_signal(signal.SIGTERM)
    p.proc.wait(30)
    return out, acc, truth


def test_determinism_under_seed_and_truth(start_sim, tmp_path):
    a, acc_a, truth = _run_and_collect(start_sim, tmp_path, 7, "a")
    b, acc_b, _ = _run_and_collect(start_sim, tmp_path, 7, "b")
    c, _, _ = _run_and_collect(start_sim, tmp_path, 8, "c")
    assert a == b and acc_a == acc_b
    assert a != c
    events = [json.loads(ln) for ln in truth.read_text().splitlines()]
    ready = [e for e in events if e["event"] == "ready"]
    assert len(ready) == 1 and isinstance(ready[0]["t"], float)
    toks = [e for e in events if e["event"] == "token"]
    assert toks and all(e["t"] >= ready[0]["t"] for e in toks)
    by_rid = {}
    for e in toks:
        by_rid.setdefault(e["rid"], []).append(e)
    for evs in by_rid.values():
        assert sum(e["n"] for e in evs) == 40
        assert [e["first"] for e in evs] == [True] + [False] * (len(evs) - 1)
        assert all(e["t"] >= e["due"] for e in evs)   # never before the model's step deadline


# --- 0.5.23 argument handling --------------------------------------------------------------
def test_cuda_graph_max_bs_is_ambiguous_as_in_0_5_23():
    r = subprocess.run([sys.executable, "-m", "specc.sim", "--model-path", "m",
                        "--cuda-graph-max-bs", "64"], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in r.stderr


@pytest.mark.parametrize("extra,triple", [
    (["--speculative-num-draft-tokens", "8"], (0, 10, 8)),   # SGLang: topk 10, steps 8 // 10
    ([], (1, 10, 12)),                                       # draft tokens default 12
])
def test_ngram_resolved_by_the_server(start_sim, extra, triple):
    p = start_sim("--model-path", "m", "--speculative-algorithm", "NGRAM", *extra)
    p.wait_ready()
    info = httpx.get(p.url + "/server_info").json()
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == triple
    assert info["max_running_requests"] == 48
    log = p.log()
    assert "The mixed chunked prefill are disabled because of using ngram" in log
    assert ("speculative_num_draft_tokens is set to 12 by default" in log) == (not extra)
    assert "Capture target verify CUDA graph begin" in log and "Capture draft" not in log
    r = httpx.post(p.url + "/generate", json={"text": "x", "sampling_params": {
        "max_new_tokens": 5, "ignore_eos": True}}).json()
    assert r["meta_info"]["completion_tokens"] == 5


def test_tree_within_sglang_draft_token_bound_serves(start_sim):
    # (3, 4, 16): 16 > 3*4+1 but <= topk + (steps-1)*topk^2 + 1 = 37
    assert sg.max_draft_tokens(3, 4) == 37
    args = list(SPEC_ARGS)
    args[args.index("--speculative-eagle-topk") + 1] = "4"
    args[args.index("--speculative-num-draft-tokens") + 1] = "16"
    p = start_sim(*args)
    p.wait_ready()
    info = httpx.get(p.url + "/server_info").json()
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (3, 4, 16)
    assert "num_tokens_per_req=16" in p.log()


def test_yarn_without_original_derives_unscaled(start_sim, tmp_path):
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 32768,
        "rope_scaling": {"type": "yarn", "factor": 4.0}, "num_hidden_layers": 2}))
    p = start_sim("--model-path", str(tmp_path / "y"), "--sim-target-facts",
                  json.dumps({"weight_gb": 0.5}))
    p.wait_ready()
    assert httpx.get(p.url + "/v1/models").json()["data"][0]["max_model_len"] == 32768


# --- one source with the compiler ----------------------------------------------------------
def test_sim_uses_the_compiler_facts(tmp_path):
    """Architecture (the wrapper's), the automatic memory fraction and KV bytes per token
    come from specc.facts / specc.engines.sglang, not from the simulator."""
    from specc import facts
    from specc.sim.args import GPU_MEM_GB, Sim, build_parser

    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps(KIMI_CFG))
    args = build_parser().parse_args(["--model-path", str(tmp_path / "kimi"), "--tp-size", "8",
                                      "--sim-target-facts", json.dumps({"weight_gb": 554})])
    sim = Sim(args, None)
    resolved = facts.resolve({"path": str(tmp_path / "kimi")}, "model_pair.target")
    assert sim.arch == resolved.architecture == "KimiK25ForConditionalGeneration"
    assert sim.mem_fraction == sg.auto_mem_fraction_static(gpu_memory_gb=GPU_MEM_GB, tp=8)
    per_token = facts.kv_bytes_per_token(resolved.values, tp=8)
    assert sim.max_total_tokens == int(sim.kv_gb * 1e9 / per_token)


def test_multinode_rank0_loads_only_when_its_peer_has_joined(start_sim):
    dist = f"127.0.0.1:{free_port()}"
    common = ["--model-path", "sim/llama", "--tp-size", "4", "--nnodes", "2",
              "--dist-init-addr", dist]
    head = start_sim(*common, "--node-rank", "0")
    head.wait_log("Init parallel begin.")
    assert _listening(head.proc.pid, int(dist.rsplit(":", 1)[1])), "rank 0 never listened"
    assert "Load weight begin" not in head.log()   # waiting at the rendezvous
    peer = start_sim(*common, "--node-rank", "1")
    head.wait_ready(timeout=60)
    # it loaded only once its peer had joined: the log's order, not a guessed pause
    _in_order(head.log(), ["Init parallel begin.", "node 1 joined (2/2 nodes)",
                           "Load weight begin"])
    peer.wait_log(" TP3] Init parallel ends")   # peer logs its own TP ranks, 2 and 3
    assert " TP2]" in peer.log() and " TP0]" not in peer.log()
    head.proc.terminate()
    head.proc.wait(30)
    assert peer.proc.wait(30) == 0   # it goes with rank 0
    assert "has gone: node 1 exits" in peer.log()


def _listening(pid: int, port: int, timeout: float = 60.0) -> bool:
    """The process listens on the port (its rendezvous is open)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                   for c in psutil.Process(pid).net_connections("tcp")):
                return True
        except psutil.Error:
            return False
        time.sleep(0.05)
    return False
