"""specc's executor tasks (`specc --help`, or `inv --list` in a checkout). Each runs exactly
what a plan.json says.

Exit codes: 0 ok, 2 invalid input, plan or run dir, 3 a server or point failed, 4 the run
dir is in use by another executor.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from invoke import Collection, Exit, task


#: What `--run latest` means, in every task's help.
LATEST = "run dir, or `latest`: the one under ./outputs/ last compiled into or run"


def _named_run(run: str, flag: str = "--run") -> Path:
    """`--run DIR`, or `--run latest` (specc.run.status.named_run); Exit(2) with its line."""
    from specc.run import status as run_status

    try:
        return run_status.named_run(run, flag)
    except run_status.Refused as e:
        raise Exit(e.line, code=e.code) from None


def _print(text: str) -> None:
    """Print what holds data (run dir names, labels, a server's reasons): control
    characters and terminal escapes in it are shown as escapes, never obeyed."""
    from specc.files import printable

    print(printable(text))


def _one(e) -> str:
    """An error's text on one line, control characters escaped (it may name a path found
    on disk)."""
    from specc.files import one_line

    return one_line(e)


def _run_dir(run: str) -> Path:
    """A folder holding a plan.json (specc.run.status.run_dir); Exit(2) with its line."""
    from specc.run import status as run_status

    try:
        return run_status.run_dir(run)
    except run_status.Refused as e:
        raise Exit(e.line, code=e.code) from None


def _open_run(d: Path, *, edited_ok: bool = False):
    """The run dir through its one door (specc.rundir.RunDir); Exit(2) with its one line."""
    from specc.run import status as run_status

    try:
        return run_status.open_run(d, edited_ok=edited_ok)
    except run_status.Refused as e:
        raise Exit(e.line, code=e.code) from None


@task(help={"experiment": "experiment name (conf/experiment/NAME.yaml)",
            "engine": "sglang (default), vllm or sim",
            "overrides": "more Hydra overrides, space-separated, e.g. 'hardware.tp=4'"})
def plan(c, experiment="eagle3_sweep", engine="", overrides=""):
    """Compile an experiment into a reviewable plan (plan.json, plan.sh, review.md)."""
    args = [f"+experiment={experiment}"] + ([f"engine={engine}"] if engine else [])
    try:
        args += shlex.split(overrides)
    except ValueError as e:   # an unclosed quote
        raise Exit(f"error TASK_USAGE at --overrides: {e} in {overrides!r} (fix: quote each "
                   "override as the shell would, e.g. --overrides \"a='b c'\")", code=2) from None
    result = c.run(shlex.join([sys.executable, "-m", "specc", *args]), warn=True, pty=False)
    if not result.ok:
        raise Exit(code=result.exited)


@task(help={"plan": "path to a reviewed plan.json (its folder is the run dir), or `latest`: "
                    "that of the run dir under ./outputs/ last compiled into or run",
            "retry_failed": "forget failed points first so they run again",
            "accept_edited": "run a plan.json whose digest or seal does not hold (edited since "
                             "it was compiled and reviewed, or sealed by another user's key)"})
def run(c, plan, retry_failed=False, accept_edited=False):
    """Run a reviewed plan.json as written: launch, readiness, benchmarks, teardown, report."""
    from specc.rundir import plan_to_run
    from specc.plan import OLD_JOBS_FILE
    from specc.run.executor import execute_plan

    path = _named_run(plan, "--plan") / "plan.json" if plan == "latest" else Path(plan)
    try:   # read once: the bytes whose seal is checked are the plan that runs
        raw, data, p = plan_to_run(path)
    except (OSError, ValueError) as e:   # PlanError, UnreadableFile are ValueErrors
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise Exit(f"error PLAN_UNREADABLE at {plan}: {why}", code=2) from None
    _check_seal(plan, path, raw, data, accept_edited=accept_edited)
    del data
    if not p.cluster and (path.parent / OLD_JOBS_FILE).exists():   # never run it here instead
        raise Exit(f"error PLAN_UNREADABLE at {plan}: compiled for Slurm by an older specc (its "
                   f"jobs are in {OLD_JOBS_FILE}, not in the plan); compile the experiment again",
                   code=2)
    if p.cluster:   # the plan's Slurm jobs: submitted and followed from here
        from specc.run.slurm import execute_slurm
        from specc.seal import pin_for_nodes

        pin_for_nodes(raw)   # each job's node runs only these bytes
        del raw
        code = execute_slurm(p, path.resolve().parent, retry_failed=retry_failed,
                             accept_edited=accept_edited)
    else:
        code = execute_plan(p, path.resolve().parent, ctx=c, retry_failed=retry_failed)
    if code:
        raise Exit(code=code)


def _check_seal(shown: str, path: Path, raw: bytes, now, *, accept_edited: bool) -> None:
    """The plan that runs must be the plan that was reviewed: plan.json's bytes match its
    digest, and its seal is one this user's compile made (specc/seal.py). Else one line
    (exit 2) and what differs from the reviewed copy; with --accept-edited, a warning, also
    kept in the run dir's executor.log (and the manifest says `plan_seal`)."""
    from specc import seal
    from specc.files import append_durable

    verdict = seal.check(raw)
    if verdict.ok:
        return
    if not accept_edited:
        reviewed, which = seal.reviewed_copy(verdict.digest, path.resolve().parent)
        lines = [f"error {verdict.code} at {shown}: plan.json {verdict.why}; review it and pass "
                 "--accept-edited to run it as it is, or compile the experiment again"]
        if reviewed is not None:
            found = seal.differences(reviewed, now if isinstance(now, dict) else {})
            lines += [f"  differs from {which}:"] + [f"    {_one(x)}" for x in found or
                                                      ["nothing but its digest and seal"]]
        raise Exit("\n".join(lines), code=2)
    line = (f"warning {verdict.code} at {shown}: plan.json {verdict.why}; running it as edited "
            "(--accept-edited)")
    print(line, file=sys.stderr)
    try:
        append_durable(path.parent / "executor.log",
                       f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
    except OSError:
        pass


@task(help={"run": LATEST})
def status(c, run):
    """Show each server's state (pid alive, phase, port) and the points done."""
    from specc.run import status as run_status

    try:   # `specc status` runs it without invoke (specc/__main__.py): the same text
        run_status.show(run)
    except run_status.Refused as e:
        raise Exit(e.line, code=e.code) from None


@task(help={"run": LATEST, "server": "server id (default: all)", "lines": "lines per log",
            "follow": "keep printing new lines"})
def logs(c, run, server="", lines=40, follow=False):
    """Print the last lines of each server's log (the log knows)."""
    if int(lines) < 0:
        raise Exit(f"error TASK_USAGE at --lines: {lines} is negative (fix: a count of lines, "
                   "e.g. --lines 40)", code=2)
    d = _run_dir(run)
    files = sorted((d / "servers").glob(f"{server or '*'}.log"))
    files += sorted((d / "slurm" / "logs").glob(f"{server or '*'}-*.out"))   # Slurm jobs' own
    if not files:
        raise Exit(f"error: no server logs in {d / 'servers'}", code=2)
    from specc.files import LOG_TAIL_BYTES, UnreadableFile, read_text

    for f in files:
        try:
            text = read_text(f, LOG_TAIL_BYTES, tail=True)
        except (UnreadableFile, OSError) as e:
            raise Exit(f"error RUN_DIR_FILE: {e}", code=2) from None
        print(f"==> {f.name} <==")
        print("\n".join(text.splitlines()[-lines:]))
    if follow:
        c.run(shlex.join(["tail", "-n", "0", "-F", *map(str, files)]), pty=False, warn=True)


@task(help={"plan": "path to a plan.json, or `latest` (as in `specc run`)",
            "python": "the engine's Python (default: the one each launch command runs under)"})
def doctor(c, plan, python=""):
    """Preflight: check the installed engine release and its parser against a plan.

    On the node that will run the servers: the installed engine must be the release the
    plan targets, and its own argument parser must accept every launch command.
    Launches nothing; exit 2 with one line per problem."""
    from specc.plan import Plan
    from specc.run.doctor import check_plan

    if plan == "latest":   # the last run dir's, through its one door
        p = _open_run(_named_run(plan, "--plan"), edited_ok=True).plan
    else:
        try:
            p = Plan.load(Path(plan))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise Exit(f"error PLAN_UNREADABLE at {plan}: {e}", code=2) from None
    found: list = []
    problems = check_plan(p, python=python or None, found=found)
    if problems:
        raise Exit("\n".join(d.line() for d in problems), code=2)
    version = p.engine_info.version
    builds = sorted({f"{dist} {build}" for _, dist, build in found
                     if p.engine_info.package and f"{dist} {build}" != f"{p.engine} {version}"})
    print(f"ok: {p.engine} {version}" + (f" (installed: {', '.join(builds)})" if builds else "")
          + f": its own parser accepts all {len(p.servers)} launch command(s)"
          + ("" if p.engine != "sim" else " (the simulator's parser)"))


@task(help={"run": LATEST, "grace": "seconds between SIGTERM and SIGKILL"})
def down(c, run, grace=10.0):
    """Stop every server this run started (from state.json) and verify they are gone."""
    from specc import exits
    from specc.run import rundir
    from specc.run.lifecycle import is_leftover, stop_leftovers, wait_port_free
    from specc.state import RunState, StateError, corrupt_line

    d = _run_dir(run)
    from specc.run import slurm

    if slurm.is_slurm_run(d):   # scancel, then squeue until they are gone
        try:
            with rundir.locked(d, need_write=False):
                stopped, left = slurm.down(d, timeout_s=float(grace) + 10)
        except rundir.RunDirBusy as e:
            raise Exit(f"error RUN_DIR_BUSY: {e}", code=exits.BUSY) from None
        except slurm.SlurmError as e:
            raise Exit(f"error: {e}", code=3) from None
        for line in stopped:
            print(f"cancelled {line}")
        if left:
            raise Exit("\n".join(left), code=3)
        print("no Slurm job running" if not stopped else
              f"{len(stopped)} job(s) cancelled; verified gone from squeue")
        return
    try:
        with rundir.locked(d, need_write=False):
            try:
                state = RunState(d / "state.json")
            except StateError as e:
                raise Exit(corrupt_line(d / "state.json", e), code=2) from None
            outcomes = stop_leftovers(state, grace_s=float(grace))
    except rundir.RunDirBusy as e:
        raise Exit(f"error RUN_DIR_BUSY: {e}", code=exits.BUSY) from None
    except rundir.RunDirUnwritable as e:
        raise Exit(f"error RUN_DIR_UNWRITABLE: {e}", code=2) from None
    for _, line in outcomes:
        print(line)
    stopped = [line for kind, line in outcomes if kind == "stopped"]
    problems = []
    for sid, s in state.servers.items():   # verified from the processes, not from state.json
        if is_leftover(s):
            problems.append(f"{sid}: process group {s.get('pgid') or s.get('pid')} still alive")
        elif (s.get("port") and any(line.startswith(f"stopped {sid} ") for line in stopped)
              and not wait_port_free(s.get("host", "localhost"), s["port"], 2)):
            problems.append(f"{sid}: port {s['port']} still in use")
    if state.write_error:
        print(f"warning: {state.write_error}: state.json does not record this", file=sys.stderr)
    if problems:
        raise Exit("\n".join(problems), code=3)
    print("nothing running" if not stopped else f"{len(stopped)} server(s) stopped; verified gone")


@task(help={"run": LATEST + " (a multirun sweep dir combines its jobs)"})
def report(c, run):
    """Write report.md/.csv/.json and plots from results.jsonl, and print the tables."""
    from specc.report import ReportError, combine_reports, render_terminal, write_report
    from specc.rundir import RunDirError

    d = _named_run(run)
    if not d.is_dir():
        raise Exit(f"error RUN_DIR_INVALID at --run: no run dir at {run!r}", code=2)
    if os.path.lexists(d / "plan.json"):   # a FIFO or device there is refused when read
        try:
            report = write_report(d)
        except RunDirError as e:   # its plan.json: the same line in every command
            raise Exit(_one(e), code=2) from None
        except (ReportError, OSError, ValueError) as e:   # UnreadableFile is a ValueError
            why = f"{e.strerror} ({e.filename})" if isinstance(e, OSError) and e.strerror else e
            raise Exit(f"error REPORT: {why}", code=2) from None
        print(render_terminal(report))
        print(f"report: {d / 'report.md'}")
        return
    jobs = sorted(p.parent for p in d.glob("*/plan.json"))
    if not jobs:
        raise Exit(f"error: no plan.json in {d} or its job folders", code=2)
    print(f"combined report: {combine_reports(d, jobs)}")


@task(iterable=["runs"],
      help={"runs": "run dirs: the first is the reference, each later one is compared to it",
            "threshold": "a change worse than this fraction (and outside noise) is a "
                         "regression, for every figure (default: the between-run noise "
                         "floor: from the project's earlier runs, else measured; "
                         "docs/compare.md)",
            "figures": "comma-separated figures that can flag a regression: "
                       "output_throughput, speedup, ttft, itl (default: all; all are shown)",
            "json": "print the comparison as JSON"})
def compare(c, runs, threshold="", figures="", json=False):
    """`specc compare RUN_A RUN_B [...]`: point by point, changes with 95% intervals,
    regressions flagged (exit 1), provenance differences first; exit 2 for bad input
    (docs/compare.md)."""
    from specc.report.compare import compare_runs, render, strict_json
    from specc.rundir import RunDirError

    try:
        gated = tuple(f.strip() for f in figures.split(",") if f.strip()) if figures else None
        result = compare_runs(list(runs), threshold=float(threshold) if threshold else None,
                              **({"figures": gated} if gated is not None else {}))
    except RunDirError as e:   # a run's plan.json: the same line in every command
        raise Exit(_one(e), code=2) from None
    except ValueError as e:   # CompareError, or a threshold that is not a number
        raise Exit(f"error COMPARE: {_one(e)}", code=2) from None
    _print(strict_json(result) if json else render(result))
    if any(c["regressed"] for c in result["comparisons"]):
        raise Exit(code=1)


def _index_db(db: str, runs=()) -> Path:
    """--db, else the project's index: that of the run dirs given, else the one found from
    here (docs/history.md)."""
    from specc.report.index import ENV, default_path

    path = Path(db).expanduser() if db else default_path(runs[0] if runs else None)
    if path is None:
        raise Exit(f"error INDEX: ${ENV} is off; give the index with --db PATH", code=2)
    return path


@task(iterable=["runs"],
      help={"runs": "run dirs, or folders holding run dirs (e.g. outputs/)",
            "rebuild": "start the index afresh: the runs it held that are still on disk, "
                       "and those given",
            "db": "the index file (default: $SPECC_INDEX, else the project's: "
                  "specc-index.sqlite in the outputs/ folder holding the runs)"})
def index(c, runs, rebuild=False, db=""):
    """`specc index RUN...`: add run dirs to the results index `specc history` reads (a
    finished run adds itself); the run dirs stay the source of truth (docs/history.md)."""
    from specc.report.index import IndexDbError, index_runs
    from specc.rundir import RunDirError

    path = _index_db(db, list(runs))
    try:
        out = index_runs(list(runs), path, rebuild=rebuild)
    except RunDirError as e:   # a run's plan.json: the same line in every command
        raise Exit(_one(e), code=2) from None
    except IndexDbError as e:
        raise Exit(f"error INDEX: {_one(e)}", code=2) from None
    from specc.files import one_line

    for p, n in out["indexed"]:
        _print(f"indexed {one_line(p)} ({n} points)")
    for p in out["gone"]:
        _print(f"dropped {one_line(p)} (no longer a run dir)")
    _print(f"index: {path} ({len(out['indexed'])} runs {'rebuilt' if rebuild else 'added'})")


@task(help={"point": "a configuration: its id, fields of what it measures ('num_steps=3 "
                     "topk=1 concurrency=2'), or (part of) its label, e.g. 'EAGLE3 s3 k1 "
                     "d4 @ c=2' (default: list the configurations)",
            "metric": "output_throughput (default), speedup, ttft, itl, or any results.jsonl "
                      "metric name",
            "db": "the index file (default: $SPECC_INDEX, else the project's: "
                  "specc-index.sqlite in ./outputs/ or a folder above)",
            "json": "print it as JSON"})
def history(c, point="", metric="output_throughput", db="", json=False):
    """`specc history --point P`: one figure of one configuration over the indexed runs,
    oldest first, with 95% intervals (docs/history.md)."""
    import json as _json

    from specc.report.index import IndexDbError, history as read_history, render_history
    from specc.rundir import RunDirError

    try:
        out = read_history(_index_db(db), point, metric)
    except RunDirError as e:   # an indexed run's plan.json: the same line in every command
        raise Exit(_one(e), code=2) from None
    except IndexDbError as e:
        raise Exit(f"error INDEX: {_one(e)}", code=2) from None
    _print(_json.dumps(out, indent=2) if json else render_history(out))


@task(help={"venv": "where the venv goes (default: in the user's cache, "
                    "$XDG_CACHE_HOME/specc/cpu-engine/, named by the recipe's hash)"})
def cpu_engine(c, venv=""):
    """`specc cpu-engine`: build (once) a venv holding vLLM's CPU build and print its python:
    a real engine for a machine without a GPU (docs/real-engine.md)."""
    from specc.cpu import engine_venv

    root = Path(venv).expanduser().resolve() if venv else engine_venv.default_dir()
    if not engine_venv.is_built(root):
        print(f"building {root}: {engine_venv.PACKAGE} {engine_venv.VERSION} and its torch "
              f"(~{engine_venv.EXPECTED_MIN} minutes on a quiet machine)", file=sys.stderr)
    try:
        py = engine_venv.ensure(root, log=lambda m: print(m, file=sys.stderr, flush=True))
    except (engine_venv.BuildFailed, OSError) as e:
        raise Exit(f"error CPU_ENGINE at --venv: {e}", code=3) from None
    print(py)


@task(help={"out": "where the two models go (default: in the user's cache, "
                  "$XDG_CACHE_HOME/specc/tiny-models/, named by the recipe's hash)",
            "venv": "the CPU engine venv whose Python builds them (default: `specc "
                    "cpu-engine`'s, built first if missing)",
            "check": "also check the target's constructed behaviour with transformers"})
def tiny_models(c, out="", venv="", check=False):
    """`specc tiny-models`: write a tiny Llama target and an EAGLE-3 draft that really
    accepts (seeded, no hub), and print where they are (docs/real-engine.md)."""
    from specc.cpu import engine_venv, models

    root = Path(venv).expanduser().resolve() if venv else engine_venv.default_dir()
    log = lambda m: print(m, file=sys.stderr, flush=True)   # noqa: E731
    try:
        py = engine_venv.ensure(root, log=log)
        dest = Path(out).expanduser().resolve() if out else models.default_dir()
        info = models.ensure(py, dest, check=check)
    except (engine_venv.BuildFailed, models.BuildFailed, OSError) as e:
        raise Exit(f"error TINY_MODELS at --out: {e}", code=3) from None
    if info.get("check") and not info["check"]["context_free"]:
        raise Exit(f"error TINY_MODELS: the target at {info['target']} does not predict from "
                   "the current token alone", code=3)
    log(f"{'built' if info['built'] else 'cached'}: target {info['target_params']:,} "
        f"params, draft {info['draft_params']:,} params, vocab {info['vocab']}"
        + (f" ({info['seconds']} s)" if info["built"] else ""))
    print(f"target: {info['target']}")
    print(f"draft: {info['draft']}")


@task(help={"only": "compile, sim, loadgen, lateness, executor, stats, slurm (default: all)"})
def bench(c, only=""):
    """Rerunnable performance benchmarks; prints the figures docs/performance.md quotes."""
    scripts = {"compile": "benchmarks/compile_speed.py", "sim": "benchmarks/sim_capacity.py",
               "loadgen": "benchmarks/loadgen_accuracy.py",
               "lateness": "benchmarks/send_lateness.py",
               "executor": "benchmarks/executor_timing.py", "stats": "benchmarks/stats_speed.py",
               "slurm": "benchmarks/slurm_speed.py"}
    if not any(Path(script).exists() for script in scripts.values()):
        raise Exit("error: no benchmarks/ here: the benchmarks ship with the source, run this "
                   "in a checkout", code=2)
    for name, script in scripts.items():
        if (not only or only == name) and Path(script).exists():
            print(f"== {name}: {script}")
            c.run(shlex.join([sys.executable, script]), pty=False, warn=True)


@task(help={"out": "calibration JSON to write (default: specc/perf/calibration/<gpu kind>.json)",
            "only": "comma-separated sections (roofline, kernel_floor, dense, moe, draft, "
                    "attention, allreduce)",
            "derive_only": "refit the constants of an existing calibration file (no GPU)"})
def calibrate(c, out="", only="", derive_only=""):
    """Measure the performance model's constants on this machine's GPU(s) (needs torch and
    CUDA; not part of CI), write the calibration file, then print model vs measurement."""
    script = "benchmarks/gpu_calibrate.py"
    if not Path(script).exists():
        raise Exit("error: no benchmarks/ here: the calibration ships with the source, run "
                   "this in a checkout", code=2)
    if derive_only:
        c.run(shlex.join([sys.executable, script, "--derive-only", derive_only]), pty=False)
        return
    if not out:
        probe = c.run(shlex.join([sys.executable, "-c",
                                  "import torch; print(torch.cuda.get_device_name(0))"]),
                      hide=True, warn=True, pty=False)
        if not probe.ok:
            raise Exit("error: no CUDA device visible to torch here", code=2)
        from specc.perf.hardware import CALIBRATION_DIR, kind_of
        out = str(CALIBRATION_DIR / f"{kind_of(probe.stdout.strip())}.json")
    args = [sys.executable, script, "--out", out] + (["--only", only] if only else [])
    c.run(shlex.join(args), pty=False)
    # the TP-8 term comes from specc's own model, which the GPU run does not import
    c.run(shlex.join([sys.executable, script, "--derive-only", out]), pty=False, hide="out")
    c.run(shlex.join([sys.executable, "-m", "specc.perf", Path(out).stem]), pty=False)


#: The collection `specc <task>` and `inv` (through the checkout's tasks.py) run.
namespace = Collection.from_module(sys.modules[__name__])
