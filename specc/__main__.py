"""`python -m specc [+experiment=NAME] [overrides]`: compile, review, and optionally execute."""

from __future__ import annotations

import sys
from pathlib import Path

from specc import exits
from specc.config import compose
from specc.compile.pipeline import compile_config
from specc.compile.emit import write_outputs



def job(config: dict, run_dir: Path, hydra_info: dict) -> int:
    """One Hydra job: compile, write the run dir, print the review, execute if asked."""
    result = compile_config(config)
    title = f"{config.get('experiment', '?')} (engine: {config.get('engine', {}).get('name', '?')})"
    text = write_outputs(run_dir, result.plan, result.diagnostics, title=title)
    if not result.ok:
        for d in result.diagnostics:
            if d.severity == "error":
                print(d.line(), file=sys.stderr)
        print(f"invalid: {sum(d.severity == 'error' for d in result.diagnostics)} error(s); "
              f"review: {run_dir / 'review.md'}", file=sys.stderr)
        return exits.INVALID
    if not hydra_info.get("multirun"):
        print(text)
    print(f"plan: {run_dir / 'plan.json'}  script: {run_dir / 'plan.sh'}  "
          f"review: {run_dir / 'review.md'}")
    if config.get("execute"):
        from specc.run.executor import execute_plan

        return execute_plan(result.plan, run_dir)
    return exits.OK


def main(argv: list[str] | None = None) -> int:
    from specc.report.combine import combine

    return compose.run(sys.argv[1:] if argv is None else argv, job, combine)


if __name__ == "__main__":
    sys.exit(main())
