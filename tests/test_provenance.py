"""The run manifest (issue 20 item 1) and report.html (item 4).

GPUs are the one thing mocked: a recorded nvidia-smi answer, parsed, and a stand-in
nvidia-smi on PATH that prints it; a machine without one says "none"."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specc.manifest import read_manifest
from specc.run import provenance

FIX = Path(__file__).parent / "fixtures" / "report"
REPO = Path(__file__).resolve().parent.parent

#: `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` on an 8x H200 node
QUERY = "NVIDIA H200, 570.124.06\n" * 8
#: the first lines of plain `nvidia-smi` on the same node
BANNER = """Mon Nov 30 10:12:03 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_a_recorded_nvidia_smi_answer_is_parsed():
    assert provenance.parse_gpus(QUERY, BANNER) == {
        "name": "NVIDIA H200", "count": 8, "driver": "570.124.06", "cuda": "12.8"}
    mixed = provenance.parse_gpus("NVIDIA H200, 570.1\nNVIDIA H100 80GB HBM3, 570.1\n", "")
    assert mixed["name"] == "NVIDIA H100 80GB HBM3 + NVIDIA H200" and mixed["count"] == 2
    assert provenance.parse_gpus("", "")["name"] == "none"


def test_no_gpu_here_says_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))   # no nvidia-smi anywhere on it
    g = provenance.gpu_info()
    assert g["name"] == "none" and g["count"] == 0 and "no nvidia-smi" in g["source"]


def test_nvidia_smi_on_path_is_asked(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nif [ -n \"$1\" ]; then printf '%s' \"$QUERY\"; "
                   "else printf '%s' \"$BANNER\"; fi\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("QUERY", QUERY)
    monkeypatch.setenv("BANNER", BANNER)
    g = provenance.gpu_info()
    assert (g["name"], g["count"], g["driver"], g["cuda"]) == ("NVIDIA H200", 8, "570.124.06",
                                                               "12.8")


def _plan_dir(tmp_path) -> Path:
    d = Path(shutil.copytree(FIX / "run_a", tmp_path / "run"))
    plan = json.loads((d / "plan.json").read_text())
    s = plan["servers"][0]
    s["argv"] = list(s["argv"]) + ["--api-key", "${API_KEY}"]
    s["env"] = {**(s.get("env") or {}), "HF_TOKEN": "hf_" + "abcdefghijklmnopqrstuvwxyz0123"}
    plan["benchmarks"][0]["params"]["dataset"] = "specc"
    (d / "plan.json").write_text(json.dumps(plan))
    (d / "state.json").write_text(json.dumps({"servers": {s["id"]: {
        "status": "stopped", "engine_release": "0.5.23"}}}))
    return d


def test_the_manifest_says_what_produced_the_run(tmp_path):
    d = _plan_dir(tmp_path)
    path = provenance.write_manifest(d, gpus={"name": "none", "count": 0, "driver": None,
                                              "cuda": None})
    m = json.loads(path.read_text())
    assert m["specc"]["version"] and m["python"] and m["host"]
    assert m["specc"]["commit"] is None or len(m["specc"]["commit"]) == 40
    assert m["engine"]["reported_release"] == "0.5.23" and m["engine"]["name"] == "sim"
    assert m["gpu"]["name"] == "none"
    assert m["plan_sha256"] == provenance.sha256_file(d / "plan.json")
    shipped = next(x for x in m["datasets"] if x["dataset"] == "specc")
    assert shipped["sha256"] == provenance.sha256_file(provenance.SHIPPED_PROMPTS)
    launch = m["launch"][0]
    assert "${API_KEY}" in launch["argv"] and launch["env"]["HF_TOKEN"] == "${HF_TOKEN}"
    assert "hf_abcdefghij" not in path.read_text()   # a value never, only its reference


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.imgs, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href"):
                self.refs.append(v)
                if tag == "img":
                    self.imgs.append(v)


def test_report_html_is_one_page_that_needs_no_network(tmp_path):
    from specc.report import write_report

    d = _plan_dir(tmp_path)
    provenance.write_manifest(d, gpus={"name": "none", "count": 0})
    write_report(d)
    text = (d / "report.html").read_text()
    page = _Page()
    page.feed(text)
    assert not [r for r in page.refs if r.startswith(("http://", "https://", "//"))]
    assert page.imgs and all(i.startswith("data:image/png;base64,") for i in page.imgs)
    assert len(page.imgs) == len(list((d / "plots").glob("*.png")))
    assert page.tags.count("table") >= 2 and "link" not in page.tags and "script" not in page.tags
    # report.md's tables, cell for cell, and the provenance
    md = (d / "report.md").read_text()
    assert "<th>output tok/s</th>" in text and "1.70x |" in md
    assert "<td>1.70x</td>" in text
    assert "Provenance (manifest.json)" in text and "hf_abcdefghij" not in text
    rep = json.loads((d / "report.json").read_text())
    assert rep["manifest"]["gpu"]["name"] == "none"


def test_report_html_without_a_manifest(tmp_path):
    from specc.report import write_report

    d = Path(shutil.copytree(FIX / "run_a", tmp_path / "run"))
    write_report(d, plots=False)
    text = (d / "report.html").read_text()
    assert "Provenance (manifest.json)" not in text
    assert "<table>" in text


@pytest.mark.parametrize("edit, message", [
    (lambda m: "{not json", "manifest.json: not JSON"),
    (lambda m: {**m, "gpu": {**m["gpu"], "count": "8"}},
     "manifest.json: manifest.gpu.count: expected an integer, got str"),
    (lambda m: {**m, "hostname": "x"}, "manifest.json: manifest: unknown key 'hostname'"),
    (lambda m: {k: v for k, v in m.items() if k != "launch"}, "manifest.json: manifest.launch: missing"),
    (lambda m: {**m, "engine": {**m["engine"], "reported_release": 5}},
     "manifest.json: manifest.engine.reported_release: expected a list, got int"),
])
def test_a_bad_manifest_is_one_line_naming_file_and_field_and_exit_2(tmp_path, edit, message):
    """The report and `specc compare` read manifest.json through its one reader."""
    d = Path(shutil.copytree(FIX / "run_a", tmp_path / "run"))
    path = provenance.write_manifest(d, gpus={"name": "none", "count": 0})
    good = json.loads(path.read_text())
    assert read_manifest(d).to_json() == good   # what is written reads back
    bad = edit(good)
    path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    ref = Path(shutil.copytree(FIX / "run_a", tmp_path / "reference"))   # never the checkout's
    for args in (["report", str(d)], ["compare", str(ref), str(d)]):
        res = subprocess.run([sys.executable, "-m", "specc", *args], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and str(d) in lines[0], res.stderr
        assert "Traceback" not in res.stderr


# ----------------------------------------------------------------------- the machine's state
#: `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`
#: on a node where the run's server (pid given at test time) and someone else's job share GPUs
APPS = "{ours}, python3, 71234\n999999999, /usr/bin/python, 40512\n"


def test_other_processes_on_the_gpus_are_named_and_the_runs_own_are_not(monkeypatch, tmp_path):
    from specc.run import machine

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '%s' \"$APPS\"\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("APPS", APPS.format(ours=os.getpid()))
    ours = {os.getpgid(0)}   # the run's servers are process groups; this test's is one
    assert machine.gpu_others(ours) == [{"pid": 999999999, "name": "/usr/bin/python",
                                         "memory_mib": 40512.0}]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))   # no nvidia-smi: not readable
    assert machine.gpu_others(ours) is None


def test_the_manifest_summarizes_the_runs_samples(tmp_path):
    """Load average min/median/max over the samples; CPU steal between consecutive samples
    of one boot (a reboot's counters start again: that span is skipped); other GPU
    processes as seen, null where never readable."""
    from specc.run import machine

    d = _plan_dir(tmp_path)
    samples = [
        {"host": "n1", "cpus": 2, "load": [0.5, 0, 0], "cpu": [100, 10_000], "gpu_others": None},
        {"host": "n1", "cpus": 2, "load": [3.5, 0, 0], "cpu": [150, 11_000], "gpu_others": None},
        {"host": "n1", "cpus": 2, "load": [1.0, 0, 0], "cpu": [250, 12_000], "gpu_others": None},
        {"host": "n1", "cpus": 2, "load": [0.9, 0, 0], "cpu": [5, 500], "gpu_others": None},
    ]
    (d / machine.SAMPLES).write_text("".join(json.dumps(s) + "\n" for s in samples)
                                     + "{torn line\n")
    m = json.loads(provenance.write_manifest(d, gpus={"name": "none", "count": 0}).read_text())
    assert m["machine"] == {"samples": 4, "cpus": 2,
                            "load_avg": {"min": 0.5, "median": 0.95, "max": 3.5},
                            "cpu_steal": 150 / 2000, "gpu_other_processes": None}
    assert read_manifest(d).to_json() == m   # what is written reads back
    # a live sample of this machine: its load, and /proc/stat's counters on Linux
    machine.record(d, when="now")
    s = machine.read_samples(d)[-1]
    assert s["when"] == "now" and len(s["load"]) == 3 and s["cpus"] >= 1
    if os.path.exists("/proc/stat"):
        assert s["cpu"][1] > s["cpu"][0] >= 0
