"""Compose: the only module that touches Hydra.

`python -m specc [+experiment=NAME] [overrides]` (and `-m` for multirun) ->
a plain dict per job, handed to the compiler. Hydra's own errors (unknown
groups or options, YAML syntax, bad overrides) become one line each, exit 2.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from specc import secrets
from specc.config import schema
from specc.config.schema import CONF_DIR


def _hydra_error_line(exc: BaseException, argv=()) -> str:
    """Turn a Hydra/OmegaConf composition error into one line with a fix hint."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException):
        missing = exc.missing_cfg_file or ""
        group, _, option = missing.rpartition("/")
        if group:
            return unknown_option_line(group, option, exc.options or [])
        return f"error CONFIG_UNKNOWN_GROUP at {missing}: {str(exc).splitlines()[0]}"
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        return (f"error NAME_TOO_LONG at hydra.run.dir: cannot create the run dir: "
                f"{exc.strerror} ({str(exc.filename)[:60]}...) (fix: use an experiment name of "
                f"at most 255 characters, or set hydra.run.dir=...)")
    override = getattr(exc, "override", None)   # hydra.errors.OverrideParseException
    if isinstance(override, str):
        key = override.split("=", 1)[0].lstrip("+~") or "<overrides>"
        shown = f"{key}=..." if any(map(secrets.is_secret, key.split("."))) else override
        first = str(getattr(exc, "message", exc)).splitlines()[0]
        return (f"error CONFIG_OVERRIDE_SYNTAX at {key}: cannot parse override {shown!r}: {first} "
                "(fix: quote the value, e.g. key='value', or see "
                "https://hydra.cc/docs/advanced/override_grammar/basic/)")
    msg = " ".join(str(exc).split())
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in msg:
        msg += ": " + " ".join(str(cause).split())
    if "Could not override" in msg:
        key = msg.split("'")[1] if "'" in msg else "?"
        chosen = next((a.split("=", 1)[1] for a in reversed(list(argv))
                       if a.lstrip("+").startswith("engine=")), "sglang")   # config.yaml's default
        given = next((a.split("=", 1)[1] for a in argv
                      if a.split("=", 1)[0].lstrip("+~") == key and "=" in a), None)
        other = schema.other_engine_key(chosen, key.split(".")[1], key, given) \
            if key.startswith("engine.") and key.count(".") == 1 else None
        if other is not None:
            return other.line()
        owned = _key_of_other_option(key, argv)
        if owned is not None:
            return owned
        return (f"error CONFIG_UNKNOWN_KEY at {key}: no such config key (fix: "
                f"{schema.unknown_key_hint(key) or 'check the spelling: `specc --cfg job` shows every key'})")
    if "Could not find" in msg or "Could not load" in msg:
        group = msg.split("'")[1] if "'" in msg else "?"
        return f"error CONFIG_UNKNOWN_GROUP at {group}: {msg} (fix: list groups with --help)"
    if any(s in msg for s in ("while scanning", "while parsing", "mapping values", "yaml")):
        return f"error CONFIG_YAML at <yaml>: {msg} (fix: correct the YAML syntax)"
    return f"error CONFIG_INVALID at <overrides>: {msg or type(exc).__name__}"


#: What Hydra writes into a run dir before the job runs (hydra.output_subdir=.hydra).
_HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}


def discard_new_run_dir(run_dir: Path) -> None:
    """Remove a run dir holding nothing but Hydra's saved config (made for this job), and
    the folders above it that are left empty, up to the working directory. A run dir with
    anything else in it (an earlier plan, a running executor's files) is left as it is."""
    import shutil

    hydra_dir = run_dir / ".hydra"
    try:
        if {p.name for p in run_dir.iterdir()} - {".hydra"} or (
                hydra_dir.exists() and {p.name for p in hydra_dir.iterdir()} - _HYDRA_FILES):
            return
        shutil.rmtree(run_dir)
        cwd, parent = Path.cwd().resolve(), run_dir.resolve().parent
        while parent != cwd and cwd in parent.parents:
            parent.rmdir()   # OSError once one holds anything
            parent = parent.parent
    except OSError:
        pass


def unknown_option_line(group: str, option: str, options) -> str:
    """A config group option that does not exist: the closest one, and every one."""
    options = list(options) or _available(group).split(", ")
    close = schema.did_you_mean(option, options)
    fix = (f"did you mean {close}? " if close else "") + f"options: {', '.join(options)}"
    return f"error CONFIG_UNKNOWN_OPTION at {group}: no option '{option}' (fix: {fix})"


def _scrub_saved_configs(files, values) -> None:
    """Hydra saves the composed config and the overrides (.hydra/, multirun.yaml) before
    the job runs: no secret may stay there (values under secret keys, secret override
    strings, and every known secret value wherever it appears)."""
    import yaml
    from omegaconf import OmegaConf

    fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for f in files:
        try:   # libyaml first: a tenth of the time, and the same strings (OmegaConf's
            # loader only reads more of them as floats, never one as a secret)
            with open(f, encoding="utf-8") as stream:
                if secrets.redact_tree(tree := yaml.load(stream, Loader=fast), values) == tree:
                    continue
        except Exception:  # noqa: BLE001 - a tag only OmegaConf reads: read it so, below
            pass
        try:
            tree = OmegaConf.to_container(OmegaConf.load(f), resolve=False)
        except Exception:  # noqa: BLE001 - not ours to validate
            continue
        clean = secrets.redact_tree(tree, values)
        if clean != tree:
            OmegaConf.save(OmegaConf.create(clean), f)


#: The sweep's id, in the environment of every job it launches.
SWEEP_ID_ENV = "SPECC_SWEEP_ID"

#: Hydra's flags that take a value (`--cfg job`); `--info` takes one optionally.
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
                     "-cn", "--config-dir", "-cd", "--experimental-rerun"}
_INFO_FLAGS = {"--info", "-i"}
_INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
#: specc's own overrides, after the user's (they must win) and after every flag.
_INTERNAL = ["hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.output_subdir=.hydra"]


def _hydra_argv(argv: list[str]) -> list[str]:
    """Flags first, then overrides: Hydra's parser takes overrides as one positional run,
    so `... key=value --multirun` or `--cfg job` after overrides would split it."""
    flags, overrides = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            overrides.append(a)
        else:
            flags.append(a)
            takes = a in _FLAGS_WITH_VALUE or (a in _INFO_FLAGS and i + 1 < len(argv)
                                               and argv[i + 1] in _INFO_TOPICS)
            if takes and i + 1 < len(argv):
                flags.append(argv[i + 1])
                i += 1
            elif a in _INFO_FLAGS:   # a bare --info must not take specc's own override as its topic
                flags.append("all")
        i += 1
    return [*flags, *overrides, *_INTERNAL]


class UsageError(Exception):
    """argparse's complaint about the command line (Hydra's parser), as one message."""


def _usage_error(self, message):   # argparse.ArgumentParser.error, while Hydra parses
    raise UsageError(message)


def _duplicate_keys(value: str) -> list[str]:
    """Keys given twice in one mapping of an override value (`{a:[1],a:[2]}`): Hydra keeps
    only the last, silently. Returned as dotted paths inside the value."""
    found: list[str] = []
    stack: list[dict] = []    # {"map": bool, "keys": set, "start": int, "key": bool, "path": str}
    quote = None
    for i, ch in enumerate(value):
        if quote:
            quote = None if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "{[":
            parent = stack[-1] if stack else None
            path = parent["path"] if parent else ""
            if parent and parent["map"] and parent.get("last"):
                path = f"{path}.{parent['last']}" if path else parent["last"]
            stack.append({"map": ch == "{", "keys": set(), "start": i + 1, "key": True,
                          "path": path})
        elif ch in "}]" and stack:
            stack.pop()
        elif stack and stack[-1]["map"]:
            top = stack[-1]
            if ch == ":" and top["key"]:
                key = value[top["start"]:i].strip().strip("'\"")
                if key in top["keys"]:
                    found.append(f"{top['path']}.{key}" if top["path"] else key)
                top["keys"].add(key)
                top["key"], top["last"] = False, key
            elif ch == ",":
                top["start"], top["key"] = i + 1, True
    return found


def duplicate_key_lines(argv: list[str]) -> list[str]:
    """One error line per key given twice inside one override's mapping."""
    lines = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        for dup in _duplicate_keys(value):
            path = f"{key}.{dup}"
            code = "SWEEP_AXIS" if key.split(".")[0] == "sweep" else "CONFIG_DUPLICATE_KEY"
            lines.append(f"error {code} at {path}: given twice in one override; Hydra would keep "
                         "only the last and silently drop the first (fix: give it once, with "
                         "every value in one list)")
    return lines


#: hydra-submitit-launcher's launchers -> specc's subclass of each (hydra_plugins/specc_submitit).
_SUBMITIT = {"submitit_slurm": "SlurmLauncher", "submitit_local": "LocalLauncher"}
_PIP = "pip install 'specc[slurm]', or pip install hydra-submitit-launcher"


class LaunchRefused(Exception):
    """A launcher refused the sweep before submitting anything: one line per problem (exit 2)."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


#: Jobs that a launcher ran in other processes (hydra-submitit-launcher: each job in its own
#: Slurm allocation), as (sweep dir, run dir, exit code): Hydra drops a job's return value
#: on the way back, so specc's launcher leaves them here for run() to fold in.
remote_jobs: list[tuple[Path, Path, int]] = []


def submitit_launcher(argv: list[str]) -> str | None:
    """`submitit_slurm` / `submitit_local` when the command line chooses that launcher."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "hydra/launcher" and value in _SUBMITIT:
            return value
    return None


def submitit_problems(argv: list[str], launcher: str) -> list[str]:
    """What stops a submitit multirun before Hydra starts: the plugin not installed, no `-m`
    (Hydra would run the one job right here), a secret on the command line (the jobs'
    overrides are pickled into the sweep dir's .submitit/ for the nodes to read)."""
    import importlib.util

    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return [f"error LAUNCHER_MISSING at hydra/launcher: {launcher} needs the "
                f"hydra-submitit-launcher package, which is not installed (fix: {_PIP})"]
    lines = []
    if not ({"-m", "--multirun", "hydra.mode=MULTIRUN"} & set(argv)):
        lines.append(f"error LAUNCHER_NEEDS_MULTIRUN at hydra/launcher: hydra/launcher={launcher} "
                     "is used only by a multirun; without -m Hydra runs the job on this machine "
                     f"(fix: add -m: specc -m hydra/launcher={launcher} ...)")
    for arg in argv:
        key, _, value = arg.partition("=")
        if arg.startswith("-") or not value or re.fullmatch(r"\$\{[^}]*\}", value):
            continue
        if secrets.scan_overrides([arg]):
            lines.append(f"error SECRET_IN_OVERRIDE at {key.lstrip('+~')}: hydra/launcher={launcher} "
                         "writes every override into the sweep dir's .submitit/ for the jobs to "
                         "read, so a secret given here would be stored there (fix: export it in "
                         "the shell that runs specc, which the jobs inherit, and leave the value "
                         "off the command line)")
    return lines


#: Flags and overrides that bring configs from outside conf/, which may set hydra.mode.
_OTHER_CONFIGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn",
                  "hydra.searchpath")


def _mode_on_command_line(argv: list[str]) -> tuple[bool, Any]:
    """(whether the command line alone decides Hydra's run mode, the mode): None (Hydra then
    takes -m or not) when no override names `hydra.mode` and every config comes from conf/
    (whose files set no mode: tests/test_cli_help.py), or the mode an override gives."""
    from hydra.types import RunMode

    keys = [a.split("=", 1)[0].lstrip("+~") for a in argv]
    if any(k in _OTHER_CONFIGS for k in keys):
        return False, None
    named = [a for a, k in zip(argv, keys) if k == "hydra.mode"]
    if not named:
        return True, None
    key, _, value = named[-1].partition("=")
    if key.startswith("~") or value not in RunMode.__members__:
        return False, None
    return True, RunMode[value]


def _list_in_one_pass(self, ctx) -> list:
    """HydraOverrideVisitor.visitListContainer, the same values: Hydra's asks the parse tree
    for its i-th element, which scans the list's children from the start each time, so a
    list of 1000 values (a swept axis) cost 500,000 steps (a tenth of a second)."""
    return [self.visitElement(element) for element in ctx.element()]


@contextlib.contextmanager
def _composed_once(argv: list[str]) -> Iterator[None]:
    """Hydra composes the whole config once only to read `hydra.mode` (Hydra.get_mode), then
    again to run it: a long override (10^5 sweep points) was parsed twice and its values
    built twice. Where the command line decides the mode, it is said without composing.
    Its lists are read in one pass (_list_in_one_pass), and the cyclic GC is off while it
    composes: OmegaConf makes a few objects per value of a long override, and the scans
    they set off find nothing to free (the job turns it on again for execution)."""
    import gc

    from hydra._internal.hydra import Hydra
    from hydra.core.override_parser.overrides_visitor import HydraOverrideVisitor

    get_mode = Hydra.get_mode
    visit_list = HydraOverrideVisitor.visitListContainer
    decided, mode = _mode_on_command_line(argv)
    if decided:
        Hydra.get_mode = lambda self, config_name, overrides: mode  # type: ignore[method-assign]
    HydraOverrideVisitor.visitListContainer = _list_in_one_pass  # type: ignore[method-assign]
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        Hydra.get_mode = get_mode  # type: ignore[method-assign]
        HydraOverrideVisitor.visitListContainer = visit_list  # type: ignore[method-assign]


def _key_of_other_option(key: str, argv) -> str | None:
    """`search.verify` with `search=grid`: a key that only other options of its config
    group have (conf/<group>/*.yaml) is named with them, not called a misspelling."""
    import yaml

    group, _, rest = key.partition(".")
    if not rest or not (CONF_DIR / group).is_dir():
        return None
    chosen = next((a.split("=", 1)[1] for a in reversed(list(argv))
                   if "=" in a and a.split("=", 1)[0].lstrip("+~") == group), None)
    if chosen is None:   # config.yaml's default for the group
        defaults = (yaml.safe_load((CONF_DIR / "config.yaml").read_text()) or {}).get("defaults")
        chosen = next((d[group] for d in defaults or [] if isinstance(d, dict) and group in d),
                      None)
    owners = []
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        node: Any = yaml.safe_load(path.read_text())
        for part in rest.split("."):
            node = node.get(part, _ABSENT) if isinstance(node, dict) else _ABSENT
        if node is not _ABSENT:
            owners.append(path.stem)
    if not owners or chosen in owners:
        return None
    run = f" (this run: {group}={chosen})" if chosen else ""
    return (f"error CONFIG_UNKNOWN_KEY at {key}: {key} is a setting of "
            f"{' or '.join(f'{group}={o}' for o in owners)} only{run} (fix: add "
            f"{group}={owners[0]}, or drop {key})")


_ABSENT = object()


def _available(group: str) -> str:
    return ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))


def run(argv: list[str], job, finish_sweep) -> int:
    """Run Hydra over `argv`, calling `job(config_dict, run_dir, hydra_info)` per job and,
    after a multirun, `finish_sweep(sweep_dir, run_dirs)`.

    Returns the worst exit code: 0 ok, 2 invalid input, 3 execution failure.
    """
    # one id per invocation, inherited by jobs a launcher runs elsewhere: two jobs of one
    # sweep must not compile into one run dir
    os.environ[SWEEP_ID_ENV] = f"{os.getpid()}-{time.time_ns()}"
    hidden = secrets.scan_overrides(argv)
    problems = duplicate_key_lines(argv)
    launcher = submitit_launcher(argv)
    if launcher:
        problems += submitit_problems(argv, launcher)
    if problems:
        for line in problems:
            print(secrets.redact(line, hidden), file=sys.stderr)
        return 2
    secrets.remember(hidden)
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = secrets.Scrubbed(sys.stdout, hidden), secrets.Scrubbed(sys.stderr, hidden)
    try:
        return _run(argv, job, finish_sweep, hidden)
    finally:
        sys.stdout, sys.stderr = old


def dir_name(name) -> str:
    """The experiment's name as one folder under outputs/: a name the schema refuses
    (`../../x`, `/abs`) must not put the review outside it."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", str(name)).lstrip(".") or "_"


_new_dirs: dict[str, str] = {}


def new_run_dir(path) -> str:
    """The default run dir, made here: ``path`` (outputs/<experiment>/<stamp>), or
    ``path_2``, ``path_3``... when another compile of the same second has it -- two
    commands a second apart wrote one plan over the other, and Hydra's saved config with
    it. Made with mkdir, so two processes racing for a name cannot both get it; once per
    process (Hydra may resolve hydra.run.dir more than once)."""
    path = str(path)
    if path not in _new_dirs:
        _new_dirs[path] = path   # unless made below: Hydra makes it, and reports its error
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            for n in range(1, 10_000):
                name = path if n == 1 else f"{path}_{n}"
                try:
                    os.mkdir(name)
                except FileExistsError:
                    continue
                _new_dirs[path] = name
                break
        except OSError:   # a name too long, a folder not writable: Hydra's own error line
            pass
    return _new_dirs[path]


def _run(argv: list[str], job, finish_sweep, hidden: set[str]) -> int:
    import hydra
    from omegaconf import OmegaConf

    os.environ["HYDRA_FULL_ERROR"] = "1"   # let errors reach us; we print them our way
    OmegaConf.register_new_resolver("specc_dir_name", dir_name, replace=True)
    OmegaConf.register_new_resolver("specc_new_run_dir", new_run_dir, replace=True)
    _new_dirs.clear()
    codes: list[int] = []
    sweep: dict = {}
    seen = set(hidden)   # every secret value met, for the sweep's multirun.yaml
    remote_jobs.clear()

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def _main(cfg) -> int:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        try:
            plain = cast(dict, OmegaConf.to_container(cfg, resolve=True))
        except Exception as exc:  # interpolation errors are user errors
            _scrub_saved_configs((run_dir / ".hydra").glob("*.yaml"), seen)
            print(secrets.redact(f"error CONFIG_INTERPOLATION at <config>: "
                                 f"{' '.join(str(exc).split())}", seen), file=sys.stderr)
            if str(hc.mode) != "RunMode.MULTIRUN":
                discard_new_run_dir(run_dir)
            codes.append(2)
            return 2
        plain.pop("hydra", None)
        seen.update(secrets.scrub_config(plain)[1])
        secrets.remember(seen)
        _scrub_saved_configs((run_dir / ".hydra").glob("*.yaml"), seen)
        multirun = str(hc.mode) == "RunMode.MULTIRUN"
        if multirun:
            sweep["dir"] = Path(hc.sweep.dir)
            if run_dir not in sweep.setdefault("jobs", []):   # colliding subdirs: once
                sweep["jobs"].append(run_dir)
        codes.append(job(plain, run_dir, {"multirun": multirun,
                                          "overrides": list(hc.overrides.task),
                                          "sweep_id": os.environ.get(SWEEP_ID_ENV, "")}))
        return codes[-1]   # for a launcher that ran this job in another process

    old_argv = sys.argv
    sys.argv = [old_argv[0], *_hydra_argv(argv)]
    launcher = submitit_launcher(argv)
    if launcher:   # specc's subclass: waits for every job, cancels them all on Ctrl-C
        sys.argv.append(f"hydra.launcher._target_=hydra_plugins.specc_submitit."
                        f"{_SUBMITIT[launcher]}")
    import argparse

    argparse_error = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = _usage_error  # type: ignore[method-assign]  # one line, not 7 of usage
    try:
        with _composed_once(argv):
            _main()
    except UsageError as exc:
        print(secrets.redact(f"error CONFIG_USAGE at <command line>: {exc} (fix: `specc --help` "
                             "lists the flags; overrides are key=value)", seen), file=sys.stderr)
        return 2
    except SystemExit as exc:   # --help, --cfg and friends
        return int(exc.code or 0)
    except LaunchRefused as exc:
        for line in exc.lines:
            print(secrets.redact(line, seen), file=sys.stderr)
        return 2
    except Exception as exc:
        line = _hydra_error_line(exc, argv)
        print(secrets.redact(line, seen), file=sys.stderr)
        return 2
    finally:
        sys.argv = old_argv
        argparse.ArgumentParser.error = argparse_error  # type: ignore[method-assign]
    for sweep_dir, run_dir, code in remote_jobs:
        sweep["dir"] = sweep_dir
        if run_dir.is_dir():   # a job that died before Hydra made its dir has nothing to combine
            sweep.setdefault("jobs", []).append(run_dir)
        codes.append(code)
    if sweep:
        _scrub_saved_configs([sweep["dir"] / "multirun.yaml"], seen)
        codes.append(finish_sweep(sweep["dir"], sweep.get("jobs", [])))
    return max(codes, default=0)
