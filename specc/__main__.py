"""`specc` / `python -m specc`: compile, review and optionally execute, or run a task.

`specc [+experiment=NAME] [overrides]` composes with Hydra; `specc <task> [options]`
(plan, run, status, logs, down, report, compare, index, history, bench) runs the packaged invoke task. A
Hydra override always holds `=` or starts with `+`, `-` or `~`, so a bare first
word can only be a task.
"""

from __future__ import annotations

import errno
import gc
import sys
from pathlib import Path

from specc import exits


def job(config: dict, run_dir: Path, hydra_info: dict) -> int:
    """One Hydra job: compile, write the run dir, print the review, execute if asked."""
    collecting = gc.isenabled()   # off already while Hydra composes (compose._composed_once)
    gc.disable()   # compiling makes 10^5s of records and no garbage cycles: scans of a heap
    try:           # that only grows were a tenth of a large compile (on again to execute)
        return _job(config, run_dir, hydra_info)
    except Exception as exc:  # noqa: BLE001 - a bug of specc's, never the user's config
        return _crashed(exc, run_dir)
    finally:
        if collecting:
            gc.enable()
        else:
            gc.disable()


def _crashed(exc: Exception, run_dir: Path) -> int:
    """specc itself failed: say so in one line (not as a config error: a crash read as
    CONFIG_INVALID once hid the tuner's divide-by-zero), keep the traceback in a file."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    where: Path | None = None
    for folder in (run_dir, Path(tempfile.gettempdir())):
        try:
            if folder.is_dir():
                fd, name = tempfile.mkstemp(prefix="specc-crash-", suffix=".txt", dir=folder)
                with open(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                where = Path(name)
                break
        except OSError:
            continue
    first = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    print(f"error INTERNAL: specc failed: {first} (a bug in specc, not in your config; "
          f"traceback: {where or 'not kept'}; please report it with that file)", file=sys.stderr)
    return exits.INTERNAL


def _job(config: dict, run_dir: Path, hydra_info: dict) -> int:
    from specc.compile.pipeline import compile_config
    from specc.run import rundir

    result = compile_config(config)
    config = result.config   # secrets replaced by references: nothing below may echo one
    if not result.ok and not hydra_info.get("multirun"):
        return _invalid(result, run_dir, "nothing written")
    try:   # held from compile to the end of execution: no other job or executor writes here
        with rundir.locked(run_dir, hand_down=True):
            if hydra_info.get("multirun"):
                taken = rundir.claim_for_job(run_dir, hydra_info.get("sweep_id", ""),
                                             hydra_info.get("overrides", []))
                if taken:
                    print(f"error RUN_DIR_TAKEN at hydra.sweep.subdir: {taken}", file=sys.stderr)
                    return exits.INVALID
            return _compile_and_run(result, config, run_dir, hydra_info)
    except rundir.RunDirBusy as e:   # an executor runs from this plan.json: never rewrite it
        print(f"error RUN_DIR_BUSY: {e}", file=sys.stderr)
        return exits.BUSY
    except rundir.RunDirUnwritable as e:
        print(f"error RUN_DIR_UNWRITABLE: {e}", file=sys.stderr)
        return exits.INVALID


def _compile_and_run(result, config: dict, run_dir: Path, hydra_info: dict) -> int:
    from specc.compile.emit import write_outputs

    title = f"{config.get('experiment', '?')} (engine: {config.get('engine', {}).get('name', '?')})"
    text = write_outputs(run_dir, result.plan, result.diagnostics, title=title,
                         params=result.params)
    gc.freeze()   # what the compile made lives as long as the run: later scans skip it
    gc.enable()
    if not result.ok:   # a multirun's job: the sweep's combined review names it invalid
        return _invalid(result, None, f"review: {run_dir / 'review.md'}")
    if not hydra_info.get("multirun"):   # as it is: print() would hand on a copy, scrubbed again
        sys.stdout.write(text)
        sys.stdout.write("\n")
    print(f"plan: {run_dir / 'plan.json'}  script: {run_dir / 'plan.sh'}  "
          f"review: {run_dir / 'review.md'}")
    if not hydra_info.get("multirun") and config.get("resume") is not False:
        run_dir, code = _unfinished(result.plan, run_dir, config)
        if code is not None:
            return code
    if config.get("execute") and result.plan.cluster:
        from specc.rundir import plan_bytes
        from specc.run.slurm import execute_slurm
        from specc.seal import pin_for_nodes

        pin_for_nodes(plan_bytes(run_dir / "plan.json"))   # what nodes may run

        return execute_slurm(result.plan, run_dir)
    if config.get("execute"):
        from specc.run.executor import execute_plan

        return execute_plan(result.plan, run_dir)
    return exits.OK


def _invalid(result, run_dir: Path | None, written: str) -> int:
    """An invalid compile: its errors, one line each, and the run dir Hydra made for it
    removed (`run_dir`; a single run writes nothing: docs/run-dir.md)."""
    for d in result.diagnostics:
        if d.severity == "error":
            print(d.line(), file=sys.stderr)
    if run_dir is not None:
        from specc.config.compose import discard_new_run_dir

        discard_new_run_dir(run_dir)
    print(f"invalid: {sum(d.severity == 'error' for d in result.diagnostics)} error(s); "
          f"{written}", file=sys.stderr)
    return exits.INVALID


def _unfinished(plan, run_dir: Path, config: dict) -> tuple[Path, int | None]:
    """The same command again (same plan digest) while a run of that plan is unfinished
    beside this one: say so and offer the command that resumes it, run nothing (resume
    unset), or carry it on (resume=true). Returns (the run dir to run in, an exit code
    when nothing more is to be done)."""
    from specc.run import rundir
    from specc.rundir import recorded_digest

    digest = recorded_digest(run_dir)
    found = rundir.unfinished_runs(run_dir, digest, plan) if digest else []
    if not found:
        return run_dir, None
    old, left, holder = found[0]
    if holder:   # being run now: neither resumed nor run twice
        print(f"a run of this plan is running now in {rundir.shown(old)} ({left}); follow it "
              f"with: specc status --run {rundir.shown(old)}")
        if config.get("execute"):
            print(f"error RUN_DIR_BUSY at resume: run dir {old} is in use by {holder}; "
                  "nothing was run here (fix: wait for it, or resume=false to start afresh)",
                  file=sys.stderr)
            return run_dir, exits.BUSY
        return run_dir, exits.OK
    if config.get("execute") and config.get("resume"):
        print(f"resuming the unfinished run in {rundir.shown(old)} ({left}); this compile "
              f"only wrote its review in {rundir.shown(run_dir)}")
        return old, None
    print(f"unfinished run of this plan: {rundir.shown(old)} ({left})\n"
          f"resume it with: {rundir.resume_command(old)}  (or add resume=true; "
          "resume=false starts afresh)")
    if config.get("execute"):
        print(f"nothing was run: this compile is only reviewed in {rundir.shown(run_dir)}")
    return run_dir, exits.OK


def _combine(sweep_dir, run_dirs):
    """After a multirun: the sweep's combined report (imported only then)."""
    from specc.report.combine import combine

    return combine(sweep_dir, run_dirs)


def _program():
    from invoke import Exit, ParseError, Program

    from specc import __version__, tasks

    class _Program(Program):
        """invoke's usage errors as specc's one line and exit 2 (invoke prints its raw
        message and exits 1; a flag that is not a number raised a traceback)."""

        def parse_tasks(self):
            try:
                super().parse_tasks()
            except (ParseError, ValueError) as e:
                raise Exit(usage_line(self.core.unparsed, e), code=exits.INVALID) from None

        def parse_cleanup(self):
            try:
                super().parse_cleanup()
            except ParseError as e:
                raise Exit(usage_line(self.core.unparsed, e), code=exits.INVALID) from None

    return _Program(namespace=tasks.namespace, name="specc", binary="specc", version=__version__)


def usage_line(argv, exc) -> str:
    task = next((a for a in argv if not a.startswith("-")), "")
    why = str(exc).replace("'", "").replace("\n", " ")
    if isinstance(exc, ValueError) and "invalid literal for int()" in why:
        why = f"{why.rsplit(': ', 1)[-1]} is not a whole number"
    return (f"error TASK_USAGE at {task or 'specc'}: {why} "
            f"(fix: `specc {task + ' ' if task else ''}--help` lists its options)")


#: Tasks that take any number of run dirs as bare words (invoke has no variadic
#: positionals): each word becomes `--runs WORD`; the options listed take a value.
VARIADIC_RUNS = {"compare": {"--threshold", "-t", "--figures", "-f"},
                 "index": {"--db", "-d"}}


def _variadic(argv: list[str]) -> list[str]:
    valued = VARIADIC_RUNS.get(argv[0]) if argv else None
    if valued is None:
        return argv
    out, i = [argv[0]], 1
    while i < len(argv):
        a = argv[i]
        if a.startswith("-"):
            out.append(a)
            if a in valued and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        else:
            out += ["--runs", a]
        i += 1
    return out


def run_task(argv: list[str]) -> int:
    """`specc <task> [options]` -> the task's exit code."""
    if {"--help", "-h"} & set(argv[1:]):
        from specc import help as cli_help

        text = cli_help.task_help(argv[0])   # invoke's text, without importing invoke
        if text is not None:
            print(text, end="")
            return exits.OK
        # invoke would read `--help` as the value of a required positional (`--run`)
        argv = ["--help", argv[0]]
    argv = _variadic(argv)
    try:
        _program().run(["specc", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return exits.OK


def _is_word(arg: str) -> bool:
    return not arg.startswith(("-", "+", "~")) and "=" not in arg


def main(argv: list[str] | None = None) -> int:
    from specc import secrets

    old = sys.stdout, sys.stderr   # nothing specc prints may hold a secret
    sys.stdout, sys.stderr = secrets.Scrubbed(sys.stdout), secrets.Scrubbed(sys.stderr)
    try:
        code = _main(sys.argv[1:] if argv is None else list(argv))
        sys.stdout.flush()   # here, where a full disk can still be said in one line
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            raise
        _stdout_gone()
        print(f"error OUTPUT at stdout: cannot write what specc prints ({e.strerror}); "
              "free space, or send it elsewhere", file=old[1])
        return exits.INVALID
    finally:
        sys.stdout, sys.stderr = old


def _stdout_gone() -> None:
    """Point stdout at /dev/null: what is still buffered goes nowhere at exit (else Python
    prints 'Exception ignored ... BrokenPipeError' and exits 120)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())  # type: ignore[union-attr]  # None: caught below
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def _closed_pipe() -> int:
    """The reader of stdout went away (`specc history | head -1`): stop quietly, as a Unix
    tool does, with the status the shell gives one that SIGPIPE ended (128 + 13)."""
    _stdout_gone()
    return 141


def _main(argv: list[str]) -> int:
    """A task runs a plan and imports no compile or config module (docs/architecture.md)."""
    if argv[:1] == ["status"] and not {"--help", "-h"} & set(argv):   # without invoke
        from specc.run import status

        code = status.main(argv[1:])
        if code is not None:
            return code
    if argv and _is_word(argv[0]):
        from specc import help as cli_help

        names = cli_help.task_names()
        if names is None:
            from specc.tasks import namespace

            names = sorted(namespace.task_names)
        if argv[0] not in names:
            print(f"error CONFIG_OVERRIDE_SYNTAX at {argv[0]}: '{argv[0]}' is neither a task "
                  f"nor a Hydra override (fix: a task ({', '.join(names)}) or key=value)",
                  file=sys.stderr)
            return exits.INVALID
        return run_task(argv)
    if argv in (["--help"], ["-h"]):
        return _help()
    from specc.config import compose

    return compose.run(argv, job, _combine)


def _help() -> int:
    """`specc --help`: Hydra's help (the config groups, the default config) and the tasks,
    read from conf/ and specc/tasks.py without composing through Hydra or importing invoke
    (specc/help.py; Hydra and invoke say it where that reader cannot)."""
    from specc import help as cli_help

    text = cli_help.config_help()
    if text is None:
        from specc.config import compose

        code = compose.run(["--help"], job, _combine)
        if code:
            return code
    else:
        print(text)
    print("\n== Tasks (specc <task> --help) ==")
    tasks = cli_help.task_list()
    if tasks is None:
        return run_task(["--list"])
    print(tasks, end="")
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
