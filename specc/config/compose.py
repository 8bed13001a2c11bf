"""Compose: the only module that touches Hydra.

`python -m specc [+experiment=NAME] [overrides]` (and `-m` for multirun) ->
a plain dict per job, handed to the compiler. Hydra's own errors (unknown
groups or options, YAML syntax, bad overrides) become one line each, exit 2.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def _hydra_error_line(exc: BaseException) -> str:
    """Turn a Hydra/OmegaConf composition error into one line with a fix hint."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException):
        missing = exc.missing_cfg_file or ""
        group, _, option = missing.rpartition("/")
        options = ", ".join(exc.options or []) if exc.options else ""
        if group:
            return (f"error CONFIG_UNKNOWN_OPTION at {group}: no option '{option}'"
                    + (f" (fix: use one of: {options})" if options else ""))
        return f"error CONFIG_UNKNOWN_GROUP at {missing}: {str(exc).splitlines()[0]}"
    override = getattr(exc, "override", None)   # hydra.errors.OverrideParseException
    if isinstance(override, str):
        from specc.engines.base import is_secret

        key = override.split("=", 1)[0].lstrip("+~") or "<overrides>"
        shown = f"{key}=..." if is_secret(key.rsplit(".", 1)[-1]) else override
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
        return (f"error CONFIG_UNKNOWN_KEY at {key}: no such config key "
                f"(fix: check the spelling, or `+{key}=...` to add a new key)")
    if "Could not find" in msg or "Could not load" in msg:
        group = msg.split("'")[1] if "'" in msg else "?"
        return f"error CONFIG_UNKNOWN_GROUP at {group}: {msg} (fix: list groups with --help)"
    if any(s in msg for s in ("while scanning", "while parsing", "mapping values", "yaml")):
        return f"error CONFIG_YAML at <yaml>: {msg} (fix: correct the YAML syntax)"
    return f"error CONFIG_INVALID at <overrides>: {msg}"


_ENV_OVERRIDE = re.compile(r"(engine\.env\.([A-Za-z_][A-Za-z0-9_]*)=)([^,]*)")
REDACTED = "<redacted>"


def _redact(node, parent: str = ""):
    """A copy of a saved Hydra yaml tree with secret env values (names per is_secret) blanked."""
    from specc.engines.base import is_secret

    if isinstance(node, dict):
        return {k: (REDACTED if parent == "env" and is_secret(str(k))
                    and not isinstance(v, (dict, list)) else _redact(v, str(k)))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_redact(v, parent) for v in node]
    if isinstance(node, str) and "engine.env." in node:
        def sub(m):
            return m.group(1) + REDACTED if is_secret(m.group(2)) else m.group(0)
        head = re.fullmatch(r"([+~]*engine\.env\.([A-Za-z_][A-Za-z0-9_]*)=)(.*)", node, re.S)
        return sub(head) if head else _ENV_OVERRIDE.sub(sub, node)
    return node


def _scrub_saved_configs(files) -> None:
    """Hydra saves the composed config and the overrides (.hydra/, multirun.yaml) before
    the job runs: secret env values (engine.env.HF_TOKEN=...) must not stay there."""
    from omegaconf import OmegaConf

    for f in files:
        try:
            tree = OmegaConf.to_container(OmegaConf.load(f), resolve=False)
        except Exception:  # noqa: BLE001 - not ours to validate
            continue
        clean = _redact(tree)
        if clean != tree:
            OmegaConf.save(OmegaConf.create(clean), f)


def _available(group: str) -> str:
    return ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))


def run(argv: list[str], job, finish_sweep) -> int:
    """Run Hydra over `argv`, calling `job(config_dict, run_dir, hydra_info)` per job and,
    after a multirun, `finish_sweep(sweep_dir, run_dirs)`.

    Returns the worst exit code: 0 ok, 2 invalid input, 3 execution failure.
    """
    import hydra
    from omegaconf import OmegaConf

    os.environ["HYDRA_FULL_ERROR"] = "1"   # let errors reach us; we print them our way
    codes: list[int] = []
    sweep: dict = {}

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def _main(cfg) -> None:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        _scrub_saved_configs((run_dir / ".hydra").glob("*.yaml"))
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
        except Exception as exc:  # interpolation errors are user errors
            print(f"error CONFIG_INTERPOLATION at <config>: {' '.join(str(exc).split())}",
                  file=sys.stderr)
            codes.append(2)
            return
        plain.pop("hydra", None)
        multirun = str(hc.mode) == "RunMode.MULTIRUN"
        if multirun:
            sweep["dir"] = Path(hc.sweep.dir)
            sweep.setdefault("jobs", []).append(run_dir)
        codes.append(job(plain, run_dir, {"multirun": multirun,
                                          "overrides": list(hc.overrides.task)}))

    old_argv = sys.argv
    sys.argv = [old_argv[0], *argv,
                "hydra/job_logging=none", "hydra/hydra_logging=none",
                "hydra.output_subdir=.hydra"]
    try:
        _main()
    except SystemExit as exc:   # --help, --cfg and friends
        return int(exc.code or 0)
    except Exception as exc:
        line = _hydra_error_line(exc)
        if "CONFIG_UNKNOWN_OPTION" in line and "use one of" not in line:
            group = line.split(" at ")[1].split(":")[0]
            line += f" (fix: use one of: {_available(group)})"
        print(line, file=sys.stderr)
        return 2
    finally:
        sys.argv = old_argv
    if sweep:
        _scrub_saved_configs([sweep["dir"] / "multirun.yaml"])
        codes.append(finish_sweep(sweep["dir"], sweep["jobs"]))
    return max(codes, default=0)
