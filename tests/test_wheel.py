"""The built wheel is the product: config and tasks inside, a `specc` console script, usable
from any directory with no checkout in sight (issue 7, bug 2).

Builds the wheel from a copy of the project's files (a stale build/ cannot leak in), installs
it into a fresh venv outside the checkout and compiles an experiment from a temp dir there.
The fresh venv gets specc only from the wheel; its third-party dependencies are lent from the
test environment through a .pth line, so the test needs no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"

pytestmark = pytest.mark.slow


def _run(argv, *, cwd, timeout=180, env=None):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    assert REPO not in root.parents
    src, dist, venv = root / "src", root / "dist", root / "venv"
    _copy_project(src)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", dist, src], cwd=root)
    (wheel,) = dist.glob("specc-*.whl")
    return {"wheel": wheel, **_venv_with(root, venv, [wheel])}


def _copy_project(src: Path) -> None:
    """The files a build reads, copied (a stale build/ or egg-info cannot leak in)."""
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("specc", "conf"):
        shutil.copytree(REPO / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _venv_with(root: Path, venv: Path, install: list) -> dict:
    """A fresh venv outside the checkout with `pip install --no-deps <install>`, the test
    environment's dependencies lent to it, and `work`, a directory to run `specc` from."""
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=root).stdout.strip())
    # dependencies only (and setuptools for an editable build): a directory on a .pth line is
    # appended to sys.path (after the venv's own site-packages) and its own .pth files (the
    # checkout's editable hook) are not run
    (purelib / "_specc_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "--no-build-isolation", "-q", *install], cwd=root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    outer = str(Path(sys.executable).parent)   # the test venv's own `specc` must not be found
    env["PATH"] = os.pathsep.join([str(venv / "bin")] + [
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != outer])
    work = root / "elsewhere"
    work.mkdir()
    return {"venv": venv, "python": python, "env": env, "work": work,
            "specc": venv / "bin" / "specc"}


def _conf_dir(inst) -> Path:
    """The config directory the installed specc composes from."""
    return Path(_run([inst["python"], "-c", "from specc.config import compose; "
                      "print(compose.CONF_DIR)"], cwd=inst["work"], env=inst["env"]).stdout.strip())


def test_the_wheel_holds_the_config_and_the_tasks(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    conf = {f"specc/conf/{p.relative_to(REPO / 'conf').as_posix()}"
            for p in (REPO / "conf").rglob("*.yaml")}
    assert conf and conf <= names, sorted(conf - names)
    assert not [n for n in names if n.startswith("conf/")]   # only inside the package
    assert "specc/tasks.py" in names
    assert "specc/data/prompts.jsonl" in names   # the default prompt set
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(installed["wheel"]).read(entry_points).decode()
    assert "specc = specc.__main__:main" in text


def test_installed_specc_compiles_an_experiment_outside_the_checkout(installed):
    env, work = installed["env"], installed["work"]
    where = _run([installed["python"], "-c", "import specc; print(specc.__file__)"],
                 cwd=work, env=env).stdout.strip()
    assert Path(where).is_relative_to(installed["venv"]), where
    conf = _conf_dir(installed)   # the configs come from the install, not from a checkout
    assert conf.is_relative_to(installed["venv"]) and conf.parts[-2:] == ("specc", "conf"), conf
    res = _run([installed["specc"], "+experiment=eagle3_sweep"], cwd=work, env=env)
    (plan,) = (work / "outputs" / "eagle3_sweep").glob("*/plan.json")
    assert "# specc review" in res.stdout
    # the same plan, byte for byte, as the checkout compiles (ids are stable)
    body, _, digest = plan.read_text().rpartition(',\n"digest":')   # sealed by its digest
    assert digest.startswith('"sha256:')
    assert body + "}\n" == (GOLDEN / "eagle3_sweep.plan.json").read_text()


def test_installed_specc_runs_the_tasks(installed):
    env, work = installed["env"], installed["work"]
    res = _run([installed["specc"], "status", "--help"], cwd=work, env=env)
    assert "Usage: specc" in res.stdout and "--run" in res.stdout
    res = _run([installed["specc"], "--help"], cwd=work, env=env)
    assert "experiment: eagle3_context_mismatch, eagle3_sweep" in res.stdout
    for name in ("plan", "run", "status", "logs", "down", "report", "bench"):
        assert f"\n  {name} " in res.stdout, name
    # a task that does work: `specc plan` compiles through the installed interpreter
    _run([installed["specc"], "plan", "--experiment", "llama3_eagle3_pack", "--engine", "sim"],
         cwd=work, env=env)
    (plan,) = (work / "outputs" / "llama3_eagle3_pack").glob("*/plan.json")
    res = _run([installed["specc"], "status", "--run", plan.parent], cwd=work, env=env)
    assert "points: 0/" in res.stdout


@pytest.mark.parametrize("mode", ["lenient", "strict"])
def test_an_editable_install_composes_from_the_checkouts_top_level_conf(tmp_path, mode):
    """`pip install -e .`: the checkout's conf/ is the one copy; an edit there is what the
    next `specc` composes, with no reinstall (strict mode links the files it had at install)."""
    src = tmp_path / "src"
    _copy_project(src)
    inst = _venv_with(tmp_path, tmp_path / "venv", [
        "--config-settings", f"editable_mode={mode}", "-e", src])
    assert (_conf_dir(inst) / "config.yaml").resolve().samefile(src / "conf" / "config.yaml")
    experiment = src / "conf" / "experiment" / "llama3_eagle3_pack.yaml"
    text = experiment.read_text()
    assert "\nexperiment: llama3_eagle3_pack\n" in text
    with experiment.open("r+") as f:   # in place: a strict install's hard link stays the file
        f.write(text.replace("\nexperiment: llama3_eagle3_pack\n", "\nexperiment: edited_in_conf\n"))
        f.truncate()
    _run([inst["specc"], "+experiment=llama3_eagle3_pack", "engine=sim"],
         cwd=inst["work"], env=inst["env"])
    assert list((inst["work"] / "outputs" / "edited_in_conf").glob("*/plan.json"))
