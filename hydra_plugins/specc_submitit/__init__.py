"""specc's launchers for Hydra multirun with each job (compile, then execute) in its own Slurm
allocation, over hydra-submitit-launcher: `specc -m hydra/launcher=submitit_slurm ...`
(`pip install 'specc[slurm]'`; specc.config.compose makes them the launcher's `_target_`).

A Hydra plugin package because Hydra instantiates launchers only from `hydra_plugins`. Without
hydra-submitit-launcher it defines nothing (Hydra's plugin scan imports it on every run). They
subclass the plugin's launchers because its own `launch` waits for the jobs one at a time and
raises at the first that failed, leaving the rest in squeue, and Hydra drops each job's return
value (specc's exit code) on its way back. Here every job is waited for, Ctrl-C or SIGTERM
cancels them all, and each job's (sweep dir, run dir, exit code) goes to compose.remote_jobs.
The jobs run the plugin's own launcher object (its `__call__`), exactly as without specc.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher as plugin
except ImportError:   # the optional extra is not installed: no launchers
    plugin = None

#: Result files are looked for every POLL_S; Slurm (sacct) is asked every STATE_S for jobs
#: that ended without one (killed, node failure), since submitit alone asks ever more rarely.
POLL_S, STATE_S = 1.0, 10.0
#: How long cancelled jobs get to leave squeue (each job's executor tears its servers down).
CANCEL_WAIT_S = 120.0


def _first_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "?"


class _SpeccLaunch:
    """`launch` for both submitit executors (slurm, local)."""

    # set by the plugin's launcher (its setup and class attributes) and by the subclasses below
    hydra_context: Any
    task_function: Any
    config: Any
    params: dict[str, Any]
    _EXECUTOR: str
    _NAME: str
    _PLUGIN: Any

    def _refusals(self, job_overrides, initial_job_idx) -> tuple[list[Path], list[str]]:
        """Each job's run dir, and what stops the sweep before anything is submitted."""
        from omegaconf import OmegaConf, open_dict

        run_dirs, lines = [], []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = idx
            run_dirs.append(Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir))
            if OmegaConf.select(cfg, "cluster.name", default=None) == "slurm":
                lines.append(
                    f"error LAUNCHER_CLUSTER at cluster: job {idx} ({' '.join(overrides)}) has "
                    f"cluster=slurm under hydra/launcher={self._NAME}: its driver would run inside "
                    "a Slurm job and submit a job per server from there (fix: cluster=local, "
                    "the default, runs each experiment on the node its job got; or drop "
                    "hydra/launcher to drive cluster=slurm jobs from this login node)")
        if self._EXECUTOR == "slurm" and not shutil.which("sbatch"):
            lines.append("error SLURM_UNAVAILABLE at hydra/launcher: no sbatch on the PATH "
                         "(fix: run on a Slurm login node, or hydra/launcher=submitit_local)")
        return run_dirs, lines

    def _executor(self):
        """The plugin's parameter mapping (hydra.launcher.* -> submitit's executor)."""
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        specific = {"max_num_timeout"}
        init = {"folder": self.params["submitit_folder"],
                **{f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k in specific}}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v
                                      for k, v in self.params.items()
                                      if k not in specific | {"submitit_folder"}})
        return executor

    def launch(self, job_overrides, initial_job_idx):
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, JobStatus

        from specc.config.compose import LaunchRefused, remote_jobs

        run_dirs, problems = self._refusals(job_overrides, initial_job_idx)
        if problems:
            raise LaunchRefused(problems)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        executor = self._executor()
        params = [(list(o), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())
                  for idx, o in enumerate(job_overrides, start=initial_job_idx)]
        runner = self._PLUGIN(**self.params)   # what each job unpickles and calls
        runner.setup(hydra_context=self.hydra_context, task_function=self.task_function,
                     config=self.config)
        try:
            jobs = executor.map_array(runner, *zip(*params))
        except Exception as exc:  # noqa: BLE001 - sbatch refused the array (its stderr is above)
            raise LaunchRefused([
                f"error SLURM_SUBMIT at hydra/launcher: {self._NAME} could not submit the sweep, "
                f"nothing is queued: {' '.join(str(exc).split())[:300]} (fix: check "
                "hydra.launcher.partition, account and gpus_per_node, and that sbatch works "
                "here)"]) from None
        print(f"submitted {len(jobs)} job(s) through {self._NAME}: "
              f"{', '.join(j.job_id for j in jobs)}; sweep dir {sweep_dir}; each job's output in "
              f"{Path(str(jobs[0].paths.stdout)).parent.parent}/<job id>/", flush=True)
        codes = self._wait(jobs, run_dirs, initial_job_idx)
        self._gone(jobs)
        returns = []
        for overrides, run_dir, code in zip(job_overrides, run_dirs, codes):
            remote_jobs.append((sweep_dir, run_dir, code))
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            ret.return_value = code
            returns.append(ret)
        return returns

    def _wait(self, jobs, run_dirs, first: int) -> list[int]:
        """Every job's exit code; on SIGINT/SIGTERM/SIGHUP every job still in Slurm is cancelled
        and waited out of squeue (its executor tears its servers down on Slurm's SIGTERM)."""
        codes: dict[int, int] = {}
        stop: list[int] = []

        def on_signal(signum, _frame):
            if not stop:
                print(f"\n{signal.Signals(signum).name}: cancelling the sweep's jobs", flush=True)
            stop.append(signum)

        old = {s: signal.signal(s, on_signal)
               for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            asked = time.monotonic()
            while len(codes) < len(jobs) and not stop:
                force = time.monotonic() - asked > STATE_S
                asked = time.monotonic() if force else asked
                for i, job in enumerate(jobs):
                    if i not in codes and job.done(force_check=force):
                        codes[i] = self._code(first + i, job, run_dirs[i])
                        force = False   # one sacct answers for every job of the sweep
                if len(codes) < len(jobs) and not stop:
                    time.sleep(POLL_S)
            if stop:
                left = [i for i in range(len(jobs)) if i not in codes]
                for i in left:
                    jobs[i].cancel(check=False)
                deadline = time.monotonic() + CANCEL_WAIT_S
                while left and time.monotonic() < deadline:
                    left = [i for i in left if not jobs[i].done(force_check=True)]
                    time.sleep(POLL_S)
                for i in range(len(jobs)):
                    if i not in codes:
                        done = jobs[i].paths.result_pickle.exists()
                        codes[i] = self._code(first + i, jobs[i], run_dirs[i]) if done \
                            else 130   # exits.INTERRUPTED: cancelled before it had a result
                if left:
                    print(f"error SUBMITIT_CANCEL: job(s) {', '.join(jobs[i].job_id for i in left)} "
                          f"still in Slurm {CANCEL_WAIT_S:.0f} s after scancel", file=sys.stderr)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        return [codes[i] for i in range(len(jobs))]

    def _gone(self, jobs) -> None:
        """Return only once Slurm holds none of the jobs: a job's result is written a moment
        before its process exits, and `specc` ending means nothing of the sweep still runs."""
        if self._EXECUTOR != "slurm":
            return
        import subprocess

        ids = ",".join(sorted({j.job_id.split("_")[0] for j in jobs}))
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            try:
                left = subprocess.run(["squeue", "-h", "-j", ids, "-o", "%i"], capture_output=True,
                                      text=True, timeout=30).stdout.split()
            except (OSError, subprocess.SubprocessError):
                return   # nothing to ask: the jobs' results are in already
            if not left:
                return
            time.sleep(0.2)
        print(f"warning SUBMITIT_JOBS_LEFT: Slurm still holds {', '.join(left)} "
              f"{CANCEL_WAIT_S:.0f} s after their results came in", file=sys.stderr)

    def _code(self, idx: int, job, run_dir: Path) -> int:
        """The job's specc exit code, or 3 with one line when it ended without one."""
        from hydra.core.utils import JobStatus

        from specc import exits

        try:
            ret = job.results()[0]
        except Exception as exc:  # noqa: BLE001 - submitit's Failed/UncompletedJobError
            reason = _first_line(exc)
            if "has not produced any output" in str(exc):
                reason = f"ended without a result (Slurm state {job.state})"
            print(f"error SUBMITIT_JOB at job {idx}: {self._NAME} job {job.job_id}: {reason}; "
                  f"its output: {job.paths.stdout}", file=sys.stderr)
            return exits.FAILED
        if ret.status != JobStatus.COMPLETED or not isinstance(ret._return_value, int):
            print(f"error SUBMITIT_JOB at job {idx}: {self._NAME} job {job.job_id}: "
                  f"{_first_line(ret._return_value)}; its output: {job.paths.stdout}",
                  file=sys.stderr)
            return exits.FAILED
        code = ret.return_value
        print(f"job {idx} ({self._NAME} job {job.job_id}): exit {code}; run dir {run_dir}",
              flush=True)
        return code


if plugin is not None:
    class SlurmLauncher(_SpeccLaunch, plugin.SlurmLauncher):
        _NAME, _PLUGIN = "submitit_slurm", plugin.SlurmLauncher

    class LocalLauncher(_SpeccLaunch, plugin.LocalLauncher):
        _NAME, _PLUGIN = "submitit_local", plugin.LocalLauncher
