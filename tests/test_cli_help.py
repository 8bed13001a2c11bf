"""`specc --help` and `specc <task> --help` without Hydra or invoke (specc/help.py): the text is
the one Hydra and invoke print, and the config groups are those conf/ holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specc import help as cli_help

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
#: What specc adds to every Hydra command line (specc/config/compose.py).
INTERNAL = ["hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.output_subdir=.hydra"]


def hydra_help(conf: Path, capsys) -> str:
    """What Hydra's own `--help` prints for the config in `conf`."""
    from hydra import initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra

    capsys.readouterr()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        parser = get_args_parser()
        GlobalHydra.instance().hydra.app_help(config_name="config", args_parser=parser,
                                              args=parser.parse_args(["--help", *INTERNAL]))
    return capsys.readouterr().out


def invoke_help(argv: list[str]) -> str:
    """What invoke prints, in a process of its own (invoke's help of a task is used up the
    first time a process shows it)."""
    code = ("import sys; from specc.__main__ import _program\n"
            "try:\n    _program().run(['specc', *sys.argv[1:]])\nexcept SystemExit:\n    pass")
    res = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_config_help_is_hydras_text(capsys):
    assert cli_help.conf_dir() == CONF
    text = cli_help.config_help(CONF)
    assert text is not None
    assert text + "\n" == hydra_help(CONF, capsys)   # Hydra prints it with print()
    assert "== Configuration groups ==" in text and "\nengine: sglang, sim, vllm\n" in text


def test_a_group_or_option_added_to_conf_shows(tmp_path, capsys):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "datacenter").mkdir()
    for option in ("west", "east"):
        (conf / "datacenter" / f"{option}.yaml").write_text(f"region: {option}\n")
    (conf / "engine" / "trtllm.yaml").write_text("name: trtllm\nversion: '1.0'\n")
    (conf / "cluster" / "site").mkdir()
    (conf / "cluster" / "site" / "lab.yaml").write_text("nodes: 4\n")
    (conf / "server" / "default.yaml").write_text(
        (CONF / "server" / "default.yaml").read_text() + "note: 'yes'\nratio: 1e-3\n")
    text = cli_help.config_help(conf)
    assert text is not None
    assert "\ndatacenter: east, west\n" in text
    assert "\nengine: sglang, sim, trtllm, vllm\n" in text
    assert "\ncluster/site: lab\n" in text
    assert "  note: 'yes'\n  ratio: 0.001\n" in text   # read and written as OmegaConf does
    assert text + "\n" == hydra_help(conf, capsys)
    groups = cli_help.config_groups(conf)
    assert set(groups) == {p.parent.relative_to(conf).as_posix()
                           for p in conf.glob("*/**/*.yaml")}


def test_what_this_reader_does_not_follow_goes_to_hydra(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    config = conf / "config.yaml"
    config.write_text(config.read_text().replace("  - engine: sglang", "  - override engine: sglang"))
    assert cli_help.config_help(conf) is None


def test_every_task_help_is_invokes_text():
    names = cli_help.task_names()
    import specc.tasks

    assert names == sorted(specc.tasks.namespace.task_names)
    for name in names:
        assert cli_help.task_help(name, width=80) == invoke_help(["--help", name]), name
    assert cli_help.task_list(width=80) == invoke_help(["--list"])


def test_specc_help_whole_command():
    """The whole command as a user runs it: the header, the groups, the tasks; exit 0."""
    res = subprocess.run([sys.executable, "-m", "specc", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("specc: compile a speculative-decoding benchmark experiment")
    assert "\nexperiment: " + ", ".join(sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))) \
        in res.stdout
    assert "\n== Tasks (specc <task> --help) ==\nSubcommands:\n\n  bench " in res.stdout
    res = subprocess.run([sys.executable, "-m", "specc", "status", "--run", "x", "--help"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith(
        "Usage: specc [--core-opts] status [--options]"), res.stderr


def _sets_mode(node) -> bool:
    if isinstance(node, dict):
        hydra = node.get("hydra")
        return (isinstance(hydra, dict) and "mode" in hydra) or "hydra.mode" in node \
            or any(_sets_mode(v) for v in node.values())
    return False


def test_no_shipped_config_sets_hydra_mode():
    """The config is composed once because the command line decides the run mode
    (compose._mode_on_command_line): a file of conf/ that set hydra.mode would not be seen."""
    assert not [p for p in CONF.rglob("*.yaml") if _sets_mode(yaml.safe_load(p.read_text()))]


@pytest.mark.parametrize("argv, decided, mode", [
    (["+experiment=eagle3_sweep", "'sweep={benchmark.concurrency:[1,2]}'"], True, None),
    (["hydra.mode=MULTIRUN", "engine=sim,vllm"], True, "MULTIRUN"),
    (["++hydra.mode=RUN"], True, "RUN"),
    (["hydra.mode=BOTH"], False, None),            # Hydra's error, as before
    (["~hydra.mode"], False, None),
    (["--config-dir", "/elsewhere", "x=1"], False, None),
    (["hydra.searchpath=[file:///elsewhere]"], False, None),
])
def test_the_run_mode_read_from_the_command_line(argv, decided, mode):
    from specc.config.compose import _mode_on_command_line

    got_decided, got = _mode_on_command_line(argv)
    assert got_decided == decided
    assert (got.name if got is not None else None) == mode


def test_hydra_mode_override_still_runs_a_multirun(tmp_path):
    sweep = tmp_path / "sweep"
    res = subprocess.run([sys.executable, "-m", "specc", "hydra.mode=MULTIRUN",
                          "+experiment=llama3_eagle3_pack", "engine=sglang,vllm",
                          f"hydra.sweep.dir={sweep}"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.parent.name for p in sweep.glob("*/plan.json")) == ["0", "1"]
