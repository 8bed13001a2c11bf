"""Emit a Slurm plan's jobs: one reviewable batch script per job, and the review's job table.

Each script runs from the run dir (the driver submits from there; `sbatch` by
hand works the same from the run dir) and hands the job's servers to specc's
own executor on the allocated node: `python -m specc.run.node`. `#SBATCH`
values are single words (the schema refuses spaces and quotes, which sbatch
would split); everything the shell reads is quoted.
"""

from __future__ import annotations

from pathlib import Path

from specc.batchscript import JOB_LOG, script   # noqa: F401  (JOB_LOG: the review's)
from specc.compile.markdown import seconds, table
from specc.files import atomic_write
from specc.plan import OLD_JOBS_FILE, Plan



def review_section(plan: Plan) -> str:

    cluster = plan.cluster
    assert cluster is not None   # a Slurm plan's
    opts = [f"partition {cluster.partition or '(default)'}",
            f"account {cluster.account or '(default)'}"]
    if cluster.sbatch_args:
        opts.append("options " + " ".join(cluster.sbatch_args))
    if cluster.container_image:
        opts.append(f"container {cluster.container_image}")
    pend = cluster.pending_timeout_s
    lines = ["## Slurm jobs", "",
             f"{len(cluster.jobs)} job(s), submitted at once from the run dir with "
             f"`sbatch --parsable`; {', '.join(opts)}. A job pending longer than "
             f"{seconds(pend) if pend else 'forever'} is cancelled and its points fail with "
             "squeue's reason; Slurm's verdicts (FAILED, TIMEOUT, NODE_FAIL, CANCELLED, "
             "OUT_OF_MEMORY) fail the points the job did not finish.", ""]
    rows = []
    for job in cluster.jobs:
        rows.append([job.name, len(job.servers),
                     sum(len(plan.benchmarks_of(s)) for s in job.servers), job.nodes,
                     job.gpus_per_node, job.time_limit,
                     f"{seconds(job.deadline_s)} + {seconds(job.points_s)}", job.script])
    lines.append(table(rows, headers=["job", "servers", "points", "nodes", "GPUs/node",
                                       "time limit", "deadline + est. points", "script"]))
    return "\n".join(lines) + "\n"


def write_scripts(run_dir: Path, plan: Plan) -> None:
    """One batch script per job of a Slurm plan (the jobs themselves are in plan.json)."""
    (run_dir / OLD_JOBS_FILE).unlink(missing_ok=True)   # this plan.json replaces its plan
    if not plan.cluster:
        return
    (run_dir / "slurm" / "logs").mkdir(parents=True, exist_ok=True)
    for job in plan.cluster.jobs:
        atomic_write(run_dir / job.script, script(plan, job), mode=0o755)
