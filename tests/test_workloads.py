"""Workloads (issue 21 items 2-4): conversations turn by turn with the server's own answers,
shared system prompts, figures per turn and per input length, and the bad inputs refused
at compile time."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import pytest

from conftest import REPO
from executor_helpers import compile_plan, execute, free_port_block, set_server_env
from specc.prompts import Prompt, by_turn
from specc.prompts.datasets import check_file, load_prompts


def _mt_bench(tmp_path, *rows) -> str:
    p = tmp_path / "question.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


# --------------------------------------------------------------------------- prompts

def test_mt_bench_conversations_become_one_request_per_turn(tmp_path):
    path = _mt_bench(tmp_path, {"question_id": 81, "category": "writing",
                                "turns": ["Write a poem.", "Now make it rhyme."]},
                     {"question_id": 82, "category": "math", "turns": ["What is 2+2?"]})
    single = load_prompts("mt_bench", num=2, input_len=1, output_len=8, path=path)
    assert [(p.id, p.turn) for p in single] == [("81", 1), ("82", 1)]
    multi = load_prompts("mt_bench", num=2, input_len=1, output_len=8, path=path,
                         multi_turn=True)
    assert [(p.id, p.turn, p.text) for p in multi] == [
        ("81", 1, "Write a poem."), ("81", 2, "Now make it rhyme."), ("82", 1, "What is 2+2?")]


def test_sharegpt_conversations_send_the_human_turns(tmp_path):
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"id": "c1", "conversations": [
        {"from": "human", "value": "first question about the ocean tides"},
        {"from": "gpt", "value": "a recorded answer that is not sent"},
        {"from": "human", "value": "second question"}]}]))
    out = load_prompts("sharegpt", num=1, input_len=1, output_len=8, path=str(p),
                       multi_turn=True)
    assert [(q.id, q.turn, q.text) for q in out] == [
        ("c1", 1, "first question about the ocean tides"), ("c1", 2, "second question")]


@pytest.mark.parametrize("row,says", [
    ({"question_id": 1, "category": "writing", "turns": []},
     "a conversation with no turns ('turns' is empty)"),
    ({"question_id": 1, "category": "writing", "turns": ["fine", 7]},
     "turn 2 of 'turns' is not a string (int)"),
])
def test_a_bad_conversation_is_one_line_naming_the_file_and_line(tmp_path, row, says):
    from specc.prompts import promptsets

    path = _mt_bench(tmp_path, {"question_id": 0, "category": "qa", "turns": ["ok"]}, row)
    with pytest.raises(promptsets.DatasetFormatError) as e:
        promptsets.load("mt_bench", path=path, output_len=1, multi_turn=True)
    assert str(e.value) == f"{path}:2: {says}"


def test_sharegpt_turn_that_is_not_a_string_is_refused(tmp_path):
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "a fine first question"}, {"from": "gpt", "value": "ok"},
        {"from": "human", "value": ["not", "text"]}]}, {"conversations": []}]))
    problems = check_file("sharegpt", str(p), output_len=8, context_length=None,
                          multi_turn=True)
    assert problems == [f'{p}: entry 0: turn 3 ("from": "human") has a "value" that is not '
                        f"a string (list)"]


def _compile_errors(overrides) -> list[str]:
    from conftest import compose_config
    from specc.compile.pipeline import compile_config

    # a long context: past the default draft's 2048, opted in (its acceptance falls there)
    result = compile_config(compose_config(["engine=sim", "model_pair.context_length=8192",
                                            "model_pair.draft_context_override=true",
                                            *overrides]))
    return [d.line() for d in result.diagnostics if d.severity == "error"]


def test_multi_turn_needs_a_dataset_with_conversations():
    errors = _compile_errors(["benchmark.dataset=random", "benchmark.multi_turn=true"])
    assert errors == ["error BENCH_MULTI_TURN at benchmark.multi_turn: the random dataset has "
                      "no conversations to send turn by turn (fix: use benchmark.dataset="
                      "mt_bench|sharegpt|specc|spec_bench|speed_bench, or set "
                      "benchmark.multi_turn=false)"]


def test_a_conversation_with_no_turns_exits_2_with_one_line(tmp_path):
    path = _mt_bench(tmp_path, {"question_id": 1, "category": "writing", "turns": ["a", "b"]},
                     {"question_id": 2, "category": "writing", "turns": []})
    proc = subprocess.run([sys.executable, "-m", "specc", "engine=sim",
                           "benchmark.dataset=mt_bench", f"benchmark.dataset_path={path}",
                           "benchmark.multi_turn=true", "model_pair.context_length=2048",
                           f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and f"{path}:2: a conversation with no turns" in errors[0], errors
    assert "(fix: " in errors[0]


def test_long_inputs_are_swept_up_to_the_context_length():
    assert _compile_errors(["benchmark.dataset=random", "benchmark.output_len=16",
                            "+sweep={benchmark.input_len:[1024,8176]}"]) == []
    errors = _compile_errors(["benchmark.dataset=random", "benchmark.output_len=16",
                              "benchmark.input_len=8000", "benchmark.shared_prefix_len=500"])
    assert any("BENCH_CONTEXT_EXCEEDED" in e and "shared_prefix_len = 8516" in e
               for e in errors), errors


def test_shared_prefix_groups():
    prompts = load_prompts("random", num=6, input_len=8, output_len=4, seed=3,
                           shared_prefix_len=50, shared_prefix_groups=2)
    heads = [p.text.split("\n")[0] for p in prompts]
    assert heads[0] == heads[2] == heads[4] != heads[1] == heads[3] == heads[5]
    assert all(len(h.split()) == 50 for h in heads)
    assert all(p.input_tokens == 58 for p in prompts)
    # a conversation's later turns carry it in their history, not again
    convs = by_turn([Prompt("q1", 1, 4, id="a", later=("q2",))])
    assert [p.turn for p in convs] == [1, 2]


# --------------------------------------------------------------------------- on the simulator

def test_shared_prefix_is_prefilled_once_per_group(tmp_path):
    from sim.conftest import SimProc
    from specc.run.loadgen import run_load

    truth = tmp_path / "truth.jsonl"
    sim = SimProc(["--model-path", "sim/llama"], env={"SPECC_SIM_TRUTH": str(truth)},
                  tmp=tmp_path)
    try:
        sim.wait_ready()
        prompts = load_prompts("random", num=6, input_len=16, output_len=4, seed=1,
                               shared_prefix_len=1000, shared_prefix_groups=2)
        res = asyncio.run(run_load(sim.url, prompts, api="chat", model="m", concurrency=1,
                                   warmup=0))
        assert all(r.ok for r in res.records)
        prefills = [int(m) for m in re.findall(r"#cached-token: (\d+)", sim.log())]
    finally:
        sim.stop()
    # the first request of each group computes its system prompt; the rest find it cached
    assert prefills[-6:][:2] == [0, 0] and all(c >= 1000 for c in prefills[-4:]), prefills


def test_multi_turn_run_on_the_simulator(tmp_path):
    """A whole specc run: second turns carry the first turns' answers (more input tokens; the
    simulator's truth holds the history), turns pair with the baseline's, the report has
    acceptance and TTFT by turn."""
    run = tmp_path / "run"
    truth = tmp_path / "truth.jsonl"

    def edit(plan):
        for i in range(len(plan["servers"])):
            set_server_env(plan, i, SPECC_SIM_TRUTH=str(truth))

    plan = compile_plan(run, ["benchmark.dataset=specc", "benchmark.categories=[writing]",
                              "benchmark.multi_turn=true", "benchmark.num_prompts=3",
                              "benchmark.api=generate", "hardware.tp=1"],
                        port=free_port_block(4), edit=edit)
    assert execute(plan, run) == 0
    spec = next(b for b in plan.benchmarks if b.baseline)
    lines = [json.loads(x) for x in (run / "requests" / f"{spec.id}.jsonl").read_text()
             .splitlines()]
    assert [(x["id"], x["turn"]) for x in lines] == [
        ("writing-01", 1), ("writing-01", 2), ("writing-02", 1), ("writing-02", 2),
        ("writing-03", 1), ("writing-03", 2)]
    for first, second in zip(lines[::2], lines[1::2]):
        # turn 2 = turn 1's prompt + its 16-token answer + the second question (7 words)
        assert second["input_tokens"] == first["input_tokens"] + 16 + 7
    events = [json.loads(x) for x in truth.read_text().splitlines()]
    seconds = [e for e in events if e["event"] == "request"
               and e["history"].startswith("Write a short letter from a lighthouse keeper")
               and "rewrite it for a ten-year-old" in e["history"]]
    assert len(seconds) == 2    # the baseline's and the speculative server's turn 2
    for e in seconds:
        first_prompt, answer, question = e["history"].split("\n")
        assert len(answer.split()) == 16 and answer.split()[0].startswith("tok")
        assert question == "Now rewrite it for a ten-year-old reader."
    md = (run / "report.md").read_text()
    table = md.split("### By turn")[1].split("\n\n")[1]
    assert re.search(r"^\| 1 +\| +3 \|", table, re.M), table
    assert re.search(r"^\| 2 +\| +3 \|", table, re.M), table
    row = json.loads((run / "results.jsonl").read_text().splitlines()[-1])
    assert set(row["turns"]) == {"1", "2"}


def test_acceptance_by_input_length_in_the_report_of_a_simulator_run(tmp_path):
    """Prompts of 600-6000 tokens on one point: the report's "By input length" table shows
    the draft accepting less on the longest prompts than on the shortest."""
    run = tmp_path / "run"
    plan = compile_plan(run, ["benchmark.dataset=random", "benchmark.input_len=6000",
                              "benchmark.range_ratio=0.1", "benchmark.output_len=48",
                              "benchmark.num_prompts=16", "benchmark.api=generate",
                              "model_pair.context_length=8192",
                              "model_pair.draft_context_override=true", "hardware.tp=1"],
                        port=free_port_block(4))
    assert execute(plan, run) == 0
    md = (run / "report.md").read_text()
    table = md.split("### By input length")[1].split("\n\n")[1]
    rows = [(ln.split("|")[1].strip(), ln.split("|")[-2]) for ln in table.splitlines()[2:]]
    assert len(rows) >= 2 and rows[-1][0] == "4k-8k", table
    # speedup / accept / TTFT: the longest prompts' accept length is below the shortest's
    accept = [float(cell.split("/")[-2]) for _, cell in rows]
    assert accept[-1] < accept[0], table
    spec = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()
            if json.loads(x)["params"]]
    assert any("input_buckets" in r for r in spec)


def _truth_events(path, kind: str, n: int, timeout: float = 10.0) -> list[dict]:
    """The truth log once it holds n events of a kind (the simulator flushes every 100 ms)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        events = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if sum(e["event"] == kind for e in events) >= n or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def _conversations(n: int) -> list[Prompt]:
    return by_turn([Prompt(f"question number {i} about tides", 5, 8, id=f"c{i}",
                           later=("and the moon?", "and the sun?")) for i in range(n)])


def test_each_turn_carries_the_conversation_with_the_servers_answers(tmp_path):
    from specc.run.loadgen import run_load
    from sim.conftest import SimProc

    truth = tmp_path / "truth.jsonl"
    sim = SimProc(["--model-path", "sim/llama"], env={"SPECC_SIM_TRUTH": str(truth)},
                  tmp=tmp_path)
    try:
        sim.wait_ready()
        prompts = _conversations(3)
        res = asyncio.run(run_load(sim.url, prompts, api="chat", model="m", concurrency=2,
                                   warmup=0))
        events = _truth_events(truth, "request", 9)
    finally:
        sim.stop()
    assert all(r.ok for r in res.records), [r.error for r in res.records]
    assert [r.input_tokens for r in res.records[:3]] == [5, 5 + 8 + 3, 5 + 8 + 3 + 8 + 3]
    histories = [e["history"] for e in events if e["event"] == "request"]
    third = next(h for h in histories if len(h) == 5 and h[0]["content"].startswith(
        "question number 1 "))
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in third[2::2]] == ["and the moon?", "and the sun?"]
    # the server's own answers, as it streamed them: 8 tokens each
    assert all(len(m["content"].split()) == 8 and m["content"].split()[0].startswith("tok")
               for m in third[1::2])


def test_after_a_failed_turn_the_rest_of_its_conversation_is_not_sent(tmp_path):
    from specc.run.loadgen import run_load
    from sim.conftest import SimProc

    sim = SimProc(["--model-path", "sim/llama", "--sim-fault", "truncate_stream:4"],
                  tmp=tmp_path)
    try:
        sim.wait_ready()
        res = asyncio.run(run_load(sim.url, _conversations(2), api="chat", model="m",
                                   concurrency=2, warmup=0))
    finally:
        sim.stop()
    assert [r.error for r in res.records[1:3]] == ["not sent: turn 1 failed"] * 2
    assert res.records[0].error and not res.records[0].ok
