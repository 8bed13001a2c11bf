"""Emit: golden plan.json / plan.sh, shell quoting (property-tested through bash), secrets.

Regenerate the golden files after an intended change:

    SPECC_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_emit.py -k golden

and review the diff of tests/golden/ like any other code change.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, HealthCheck, given, settings
from hypothesis import strategies as st

from specc.compile.pipeline import compile_config
from specc.compile.emit import (_SH_PRELUDE, REVIEW_ROWS, command_line, plan_json, plan_sh,
                                review, write_outputs)
from specc.plan import digest_of
from specc.plan import Plan

GOLDEN = Path(__file__).resolve().parent / "golden"
REPO = Path(__file__).resolve().parent.parent
UPDATE = os.environ.get("SPECC_UPDATE_GOLDEN") == "1"
LLAMA = ["model_pair.context_length=2048"]

# arbitrary text an argv element can hold (no NUL, no lone surrogates)
ARG = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
              min_size=1, max_size=40)
HOSTILE = ["it's", 'a "b" c', "x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "a b",
           "line1\ntouch PWNED", "ünï€ødé 模型", "-rf", "--model-path", "${HOME}", "*",
           "\\", "a\rb", "'\"'\"'", "!!", "~root", "#comment"]


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"{path} missing: run with SPECC_UPDATE_GOLDEN=1 to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed: SPECC_UPDATE_GOLDEN=1 to accept"


@pytest.fixture(scope="module")
def sweep_plan():
    from conftest import compose_config

    result = compile_config(compose_config(["+experiment=eagle3_sweep", "engine=sglang"]))
    assert result.ok
    return result


def test_golden_plan_json(sweep_plan):
    _golden("eagle3_sweep.plan.json", plan_json(sweep_plan.plan))


def test_golden_plan_sh(sweep_plan):
    _golden("eagle3_sweep.plan.sh", plan_sh(sweep_plan.plan))


def test_golden_matches_the_cli_run_dir(tmp_path, run_specc):
    """Compiled by the real CLI from another cwd: the same bytes (nothing machine-specific)."""
    code, _, err = run_specc(["+experiment=eagle3_sweep", "engine=sglang"], tmp_path, cwd=tmp_path)
    assert code == 0, err
    text = (tmp_path / "run" / "plan.json").read_text()
    body, _, digest = text.rpartition(',\n"digest":')   # sealed with its digest: the same plan
    assert body + "}\n" == (GOLDEN / "eagle3_sweep.plan.json").read_text()
    sealed = f'"{digest_of(body.encode())}",\n"seal":"hmac-sha256:'   # then this user's HMAC
    assert digest.startswith(sealed) and len(digest) == len(sealed) + 64 + 3
    assert f"Plan digest: `{digest_of(body.encode())}`" in (tmp_path / "run" / "review.md").read_text()
    assert (tmp_path / "run" / "plan.sh").read_text() == (GOLDEN / "eagle3_sweep.plan.sh").read_text()


def test_plan_json_is_machine_independent(sweep_plan):
    text = plan_json(sweep_plan.plan)
    for needle in (str(REPO), str(Path.home()), socket.gethostname(), os.environ.get("USER") or "\0"):
        if len(needle) > 3:
            assert needle not in text


def test_plan_json_round_trips(sweep_plan):
    plan = sweep_plan.plan
    assert json.loads(plan_json(plan)) == plan.to_json()   # the same value, laid out compactly
    again = Plan.from_json(json.loads(plan_json(plan)))
    assert again == plan
    assert plan_json(again) == plan_json(plan)


@pytest.mark.parametrize("overrides", [
    ["+experiment=eagle3_sweep"], ["+experiment=eagle3_sweep", "engine=sim"],
    ["+experiment=llama3_eagle3_pack"], ["+experiment=llama3_eagle3_pack", "engine=vllm"],
    ["+experiment=llama3_eagle3_pack", "benchmark.driver=bench_serving", "benchmark.dataset=random"],
])
def test_plan_sh_is_bash_n_clean(compose, tmp_path, overrides):
    result = compile_config(compose(overrides))
    assert result.ok
    write_outputs(tmp_path, result.plan, result.diagnostics, title="t")
    sh = tmp_path / "plan.sh"
    assert os.access(sh, os.X_OK)
    proc = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _bash_argv(line: str) -> list[str]:
    out = subprocess.run(["bash", "-c", 'f() { printf "%s\\0" "$@"; }; f ' + line],
                         capture_output=True, check=True).stdout
    return out.decode("utf-8").split("\0")[:-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(ARG, min_size=1, max_size=5))
def test_command_line_round_trips_through_bash(argv):
    assert _bash_argv(command_line(argv)) == argv


def test_command_line_hostile_strings():
    assert _bash_argv(command_line(HOSTILE)) == HOSTILE


# --- the whole plan.sh, with hostile values where users put strings -------------------------

_STUBS = r'''
launch() { local id=$1 log=$2; shift 2; printf '%s\0' "$#" "$@" >> "$SPECC_TEST_ARGV"; PGID[$id]=$$; }
wait_ready() { return 0; }
stop_server() { unset "PGID[$1]"; }
python() { :; }
'''


_TARGET = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
           "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32}
_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 2048,
          "vocab_size": 128256, "draft_vocab_size": 32000, "hidden_size": 4096}


def _model_named(base: Path, name: str, config: dict) -> str:
    """A model directory whose path ends in `name` (a model path must be one: MODEL_PATH)."""
    d = Path(f"{base}/{name}")
    os.makedirs(d, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 16e9}}')
    return f"{base}/{name}"


def _hostile_plan(compose, value: str, base: Path):
    cfg = compose(LLAMA + ["baseline=true"])
    models = base / "models"
    cfg["model_pair"]["target"]["path"] = _model_named(models, "t-" + value, _TARGET)
    cfg["engine"]["extra_args"] = ["--served-model-name", value]
    cfg["engine"]["env"] = {"PLAIN_VAR": value}
    cfg["sweep"] = {"model_pair.draft.path": [_model_named(models, "d-" + value, _DRAFT),
                                              _model_named(models, "draft-" + value, _DRAFT)]}
    result = compile_config(cfg)
    assert result.ok, [d.line() for d in result.diagnostics]
    return result.plan


def _run_stubbed(plan, tmp_path: Path) -> list[list[str]]:
    for p in tmp_path.iterdir():
        p.unlink() if p.is_file() else None
    text = plan_sh(plan)
    assert text.startswith(_SH_PRELUDE)
    (tmp_path / "plan.sh").write_text(text.replace(_SH_PRELUDE, _SH_PRELUDE + _STUBS, 1))
    rec = tmp_path / "argv.bin"
    proc = subprocess.run(["bash", str(tmp_path / "plan.sh")], capture_output=True, cwd=tmp_path,
                          env={**os.environ, "SPECC_TEST_ARGV": str(rec)}, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), "plan.sh executed a value"
    # records: argc, then argc NUL-terminated values (no separator can collide with a value)
    fields = rec.read_bytes().decode("utf-8").split("\0")[:-1]
    runs = []
    while fields:
        n = int(fields.pop(0))
        runs.append(fields[:n])
        del fields[:n]
    return runs


def _expected(plan) -> list[list[str]]:
    return [["env", *(f"{k}={v}" for k, v in s.env.items()), *s.argv] for s in plan.servers]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_round_trip_through_plan_sh(compose, tmp_path, value):
    plan = _hostile_plan(compose, value, tmp_path)
    assert _run_stubbed(plan, tmp_path) == _expected(plan)
    for s in plan.servers:
        assert value in s.argv


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=ARG)
@example(value="~0")   # a home dir of an unknown user: Path.expanduser raised
@example(value="\n")    # a lone newline
def test_any_value_round_trips_through_plan_sh(compose, tmp_path, value):
    plan = _hostile_plan(compose, value, tmp_path)
    assert _run_stubbed(plan, tmp_path) == _expected(plan)


# --- secrets -----------------------------------------------------------------------------

def test_secret_env_values_are_referenced_not_written(compose, tmp_path):
    secrets = {"HF_TOKEN": "hf_abcdefgh", "API_KEY": "sk-123456", "MY_SECRET": "s3cr3t!",
               "DB_PASSWORD": "pa ss'word"}
    cfg = compose(["+experiment=llama3_eagle3_pack"])
    cfg["engine"]["env"] = {**secrets, "VISIBLE": "yes"}
    result = compile_config(cfg)
    assert result.ok
    text = write_outputs(tmp_path, result.plan, result.diagnostics, title="t")
    blobs = [text] + [p.read_text() for p in tmp_path.iterdir()]
    for v in secrets.values():
        assert not any(v in b for b in blobs), v
    sh = (tmp_path / "plan.sh").read_text()
    for k in secrets:
        assert f'{k}="${{{k}:?export {k} before running this plan}}"' in sh
    assert "VISIBLE=yes" in sh
    # the reference resolves from the caller's environment when the script runs
    line = command_line(["true"], {"HF_TOKEN": "${HF_TOKEN}"}, ("HF_TOKEN",))
    out = subprocess.run(["bash", "-c", line.replace("true", "printenv HF_TOKEN", 1).replace(
        "'printenv HF_TOKEN'", "printenv HF_TOKEN")], capture_output=True, text=True,
        env={**os.environ, "HF_TOKEN": "from-env"})
    assert out.stdout.strip() == "from-env"


def test_review_of_an_invalid_compile_lists_problems(compose):
    result = compile_config(compose(["+experiment=eagle3_context_mismatch"]))
    text = review(result.plan, result.diagnostics, title="x")
    assert "**INVALID**: 1 error(s)" in text and "CONTEXT_DRAFT_SHORTER" in text


def test_review_tables_keep_hostile_values_on_one_line(compose, tmp_path):
    cfg = compose(LLAMA + ["baseline=true"])
    cfg["sweep"] = {"model_pair.draft.path": [
        _model_named(tmp_path, "evil\n| injected | row |", _DRAFT),
        _model_named(tmp_path, "plain", _DRAFT)]}
    result = compile_config(cfg)
    assert result.ok
    text = review(result.plan, result.diagnostics, title="t")
    outside_code = text.split("```bash")[0] + text.split("```", 2)[-1]
    assert "evil\\n\\| injected \\| row \\|" in outside_code
    assert not any(ln.startswith("| injected") for ln in outside_code.splitlines())


def test_one_baseline_serves_every_draft(compose):
    cfg = compose(LLAMA + ["baseline=true"])
    # two hub drafts, each with the facts written for it
    facts = cfg["model_pair"]["draft"]["facts"]
    cfg["sweep"] = {"model_pair.draft": [{"path": p, "facts_for": p, "facts": facts}
                                         for p in ("org/draft-a", "org/draft-b")]}
    plan = compile_config(cfg).plan
    baselines = [s for s in plan.servers if s.baseline]
    assert len(baselines) == 1 and len(plan.servers) == 3
    assert all(b.baseline and b.baseline.startswith(baselines[0].id)
               for b in plan.benchmarks if b.server != baselines[0].id)


# --- scale: plan files that grow by a line per point, written as they are encoded ----------

@pytest.fixture(scope="module")
def big_plan():
    """llama3_eagle3_pack widened to 10^4 sweep points: 10 server configurations x 1,000
    client points, plus the 2 matched baselines (12,000 benchmark points)."""
    from conftest import compose_config

    cfg = compose_config(["+experiment=llama3_eagle3_pack"])
    cfg["max_points"] = 10_000
    cfg["sweep"] = {"speculation": cfg["sweep"]["speculation"][:5],
                    "server.max_running_requests": [512, 1024],
                    "benchmark.concurrency": [1, 2, 3, 4, 6, 8, 16, 32, 64, 128],
                    "benchmark.output_len": list(range(8, 808, 8))}
    result = compile_config(cfg)
    assert result.ok
    assert len(result.plan.benchmarks) == 12_000
    return result


def test_plan_json_is_one_line_per_server_and_point(big_plan, tmp_path):
    plan = big_plan.plan
    write_outputs(tmp_path, plan, big_plan.diagnostics, title="t")
    text = (tmp_path / "plan.json").read_text()
    assert Plan.load(tmp_path / "plan.json") == plan
    body, _, digest = text.rpartition(',\n"digest":')   # the last key: the digest of the rest
    assert digest_of(body.encode()) == json.loads(text)["digest"] and digest.endswith('"}\n')
    text = body + "}\n"
    assert json.loads(text) == plan.to_json()
    lines = text.splitlines()
    value = plan.to_json()
    for key in ("servers", "benchmarks"):
        start = lines.index(json.dumps(key) + ":[") + 1
        entries = lines[start:start + len(value[key])]
        assert [json.loads(e.rstrip(",").removesuffix("]")) for e in entries] == value[key]
    other = len(lines) - len(plan.servers) - len(plan.benchmarks)
    assert other == len(value)   # one line per top-level key (the lists open on theirs)
    # compact JSON plus one newline per line: no indentation (the indented file was half
    # whitespace: 80 MB of it at 10^5 points)
    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert len(text) == len(compact) + text.count("\n")


def test_plan_files_are_written_without_holding_them_in_memory(big_plan, tmp_path):
    """Streamed: the compile never holds plan.json or plan.sh whole (at 10^6 points, the
    indented plan.json alone was 615 MB, and it was held twice)."""
    import tracemalloc

    tracemalloc.start()
    try:
        write_outputs(tmp_path, big_plan.plan, big_plan.diagnostics, title="t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    smallest = min((tmp_path / f).stat().st_size for f in ("plan.json", "plan.sh"))
    assert peak < 0.75 * smallest, (peak, smallest)


def test_review_summarises_a_large_matrix(compose):
    """A table row per server up to REVIEW_ROWS, then a count: the review of 10^4 servers
    is read by a person and printed to the terminal."""
    cfg = compose(LLAMA + ["baseline=false", "hardware.tp=1"])
    cfg["max_points"] = 10_000
    n = REVIEW_ROWS + 30
    cfg["sweep"] = {"server.max_running_requests": list(range(64, 64 + n))}
    result = compile_config(cfg)
    assert result.ok and len(result.plan.servers) == n
    text = review(result.plan, result.diagnostics, title="t")
    server_rows = [ln for ln in text.splitlines() if ln.startswith("|") and "| EAGLE3 " in ln]
    assert len(server_rows) == REVIEW_ROWS
    assert "... and 30 more server(s): every one is in plan.sh and plan.json." in text
    assert "# ... and 30 more launch command(s): every one is in plan.sh." in text
    assert text.count("python -m sglang.launch_server") == REVIEW_ROWS
