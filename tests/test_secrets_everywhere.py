"""Secrets in every form (issue 22 item 2): a value that holds a credential is a secret
(`Bearer ...`, a URL's userinfo, `key=value`, AUTH/AUTHORIZATION names); a server that
echoes the Authorization header into a 401 body leaks the key into no file and no line
specc writes; a key with a backslash or a tab is blanked in its escaped forms too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO, run_specc
from executor_helpers import compile_plan, results
from specc import secrets

SK = "sk-" + "Zq8Wm3Kp1Lx7Rt4Yv9Bn2Hc6Df0Gs5Ja8Ue1Io3Pa7Tb4Mn9Qw2"   # 48 chars after sk-
HF = "hf_" + "Xy7Kq2Lm9Pz4Rt8Wv3Bn6Hc1Df5Gs0Ja2U"


@pytest.mark.parametrize("text,inside", [
    (f"Bearer {SK}", SK), (f"https://alice:{HF}@hub.example/x", f"alice:{HF}"),
    (f"--opt=x api_key={HF}", HF), (f"Authorization: Basic {HF}", HF)])
def test_a_value_that_holds_a_credential_is_blanked(text, inside):
    assert inside in secrets.embedded_secrets(text)
    assert inside not in secrets.scrub(text) and secrets.REDACTED in secrets.scrub(text)


@pytest.mark.parametrize("text", ["time to first token: 0.52s", "Authorization: Bearer ${API_KEY}",
                                  "--api-key=${API_KEY}", "max_tokens=128", "hydra.run.dir=/x"])
def test_text_without_a_credential_is_left_alone(text):
    assert secrets.scrub(text) == text and not secrets.embedded_secrets(text)


@pytest.mark.parametrize("name", ["AUTH_HEADER", "GATEWAY_AUTHORIZATION", "AUTH"])
def test_auth_names_are_secret(name):
    assert secrets.is_secret(name)


def test_escaped_forms_of_a_remembered_key_are_blanked():
    key = "Ab\\cd\tEf0123456789-xyz"
    secrets.remember([key])
    for form in (key, repr(key)[1:-1], f'{{"k": {key!r}}}'):
        assert "0123456789-xyz" not in secrets.scrub(form), form


def test_a_bearer_header_in_env_reaches_no_file_and_no_line(tmp_path):
    """`+engine.env.AUTH_HEADER="Bearer sk-..."`: a reference in plan.json/plan.sh/review.md,
    never the value, and not on the terminal."""
    code, out, err = run_specc(
        ["+experiment=eagle3_sweep", "engine=sim", f"+engine.env.AUTH_HEADER=Bearer {SK}",
         f"+engine.env.GATEWAY_AUTHORIZATION=Bearer {HF}", "baseline=false"], tmp_path)
    assert code == 0, err
    assert SK not in out + err and HF not in out + err
    run = tmp_path / "run"
    for f in run.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert SK not in text and HF not in text, f
    assert "${AUTH_HEADER}" in (run / "plan.json").read_text()


def test_a_server_echoing_the_key_in_a_401_leaks_it_nowhere(guard, tmp_path):
    """The real simulator, its generation routes answering 401 with the Authorization header
    they got; the key holds a backslash and a tab (the engine logs its repr)."""
    key = "sk-Ab\\cd\tEf" + "0123456789QwErTy"
    run_dir = tmp_path / "run"

    def edit(plan):
        plan["servers"][0]["env"]["SPECC_SIM_FAULT"] = "echo_auth"

    compile_plan(run_dir, ["baseline=false", "engine.extra_args=[--api-key,placeholder]"],
                 port=guard.port(1), edit=edit)
    env = {**os.environ, "API_KEY": key}
    proc = subprocess.run([sys.executable, "-m", "specc", "run", "--plan",
                           str(run_dir / "plan.json"), "--accept-edited"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)
    rows = results(run_dir)
    assert rows and all(r["status"] == "failed" for r in rows), (proc.stdout, proc.stderr)
    assert any("401" in (r["reason"] or "") for r in rows), rows
    report = subprocess.run([sys.executable, "-m", "specc", "report", "--run", str(run_dir)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    halves = ("sk-Ab", "Ef0123456789QwErTy")
    for text in (proc.stdout, proc.stderr, report.stdout, report.stderr):
        assert not any(h in text for h in halves), text
    written = [f for f in run_dir.rglob("*") if f.is_file()]
    assert any(f.name.startswith("report") for f in written)
    for f in written:
        text = f.read_text(errors="replace")
        assert not any(h in text for h in halves), (f, text[:2000])
    log = next((run_dir / "servers").glob("*.log")).read_text()
    assert "'api_key': '<redacted>'" in log
