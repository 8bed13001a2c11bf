"""What every engine adapter provides, and the parts they share.

An adapter turns a ServerSpec into a launch command, environment and
readiness plan, and states the engine's rules as data the semantic rules read
(so rules.py holds no engine facts).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from specc.plan import Acceptance, CacheFlush, Phase, Probe, Readiness, literal
from specc.secrets import split_args, split_env

if TYPE_CHECKING:  # pragma: no cover
    from specc.compile.spec import ServerSpec


def patterns(marker) -> tuple[str, ...]:
    """An adapter's log marker as the plan's regexes: a plain string is a literal, a
    list holds regexes (one per wording an engine release printed), None is none."""
    if marker is None:
        return ()
    if isinstance(marker, str):
        return (literal(marker),)
    return tuple(marker)


def flag_args(pairs) -> list[str]:
    """`[(flag, value)]` -> argv, skipping None; True means a bare store_true flag."""
    out: list[str] = []
    for flag, value in pairs:
        if value is None or value is False:
            continue
        out.append(flag)
        if value is not True:
            out.append(str(value))
    return out


class Engine(ABC):
    """Base adapter. Subclasses set the facts and implement `argv`."""

    name = "engine"
    version_read = ""
    default_port = 30000
    health_path = "/health"
    health_timeout_s = 0.0
    ready_line: str | None = None
    fatal_patterns: tuple[str, ...] = ()
    #: "error": startup dies when the draft's context is shorter; "cap": silently capped.
    draft_context_policy = "error"
    #: The environment variable that turns that startup error into a warning.
    context_override_env: str | None = None
    #: topk == 1 silently resets num_draft_tokens to num_steps + 1.
    rewrites_topk1_draft_tokens = False
    #: max running requests when speculation is on and none is given (None: no cap).
    spec_default_max_running: int | None = None
    #: Budget for the launch pseudo-phase: process start to the first phase marker.
    launch_budget_s = 300.0
    #: What each probe answer means while starting.
    answers = {"refused": "starting", "503": "warming", "200": "ready"}
    #: While requests are in flight the engine logs progress at least this often;
    #: a log silent this long during a benchmark means a wedged server.
    serving_silence_s = 60.0
    #: Endpoint that drops the prefix cache between points (POST; None: not supported).
    flush_cache_path: str | None = None
    #: Speculative decoding with pipeline parallelism is refused at startup.
    refuses_pp_speculation = False
    #: The config key that caps running requests.
    max_running_path = "engine.max_running_requests"
    #: Runs on GPUs (False: nothing to check for other GPU holders).
    uses_gpus = True
    #: `--backend` of SGLang's bench_serving for this engine.
    bench_serving_backend = "sglang"
    #: Target architectures allowed per algorithm (None: any).
    algorithm_targets: dict[str, tuple[str, ...]] = {}
    #: The fix to suggest when `algorithm_targets` refuses the target.
    target_unsupported_fix = "use another engine or algorithm for this pair"

    # -- launch ---------------------------------------------------------------
    @abstractmethod
    def argv(self, spec: ServerSpec, *, host: str, port: int) -> list[str]:
        """The server's launch command."""

    def env(self, spec: ServerSpec, gpus: list[int]) -> tuple[dict, list[str]]:
        """(env for the server, names of secrets referenced rather than written: in the
        env and in extra_args, which compile has already turned into references)."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        values, secrets = split_env(spec.engine.get("env") or {})
        env.update(values)
        _, in_args, _ = split_args(spec.engine.get("extra_args") or [])
        return env, secrets + [n for n in in_args if n not in secrets]

    @abstractmethod
    def derived_context_length(self, model_config: dict) -> int:
        """The context length the engine serves a model at by default, from its
        config.json values (first length key present, rope scaling included)."""

    def assumed_acceptance(self, spec: ServerSpec) -> float | None:
        """Per-position draft acceptance the server is configured to show (None: unknown
        until measured; the wall-time estimate then assumes the performance model's default)."""
        return None

    def reserved_gb_per_gpu(self, spec: ServerSpec) -> float:
        """Memory the engine sets aside per GPU beyond weights and KV cache."""
        return 0.0

    @abstractmethod
    def memory_fraction(self, spec: ServerSpec) -> tuple[float, str]:
        """(fraction of GPU memory the engine may use, where it comes from)."""

    @abstractmethod
    def max_running_requests(self, spec: ServerSpec) -> tuple[int | None, str]:
        """(effective cap on running requests or None, where it comes from)."""

    def startup_context_error(self, target_len: int, draft_len: int) -> str:
        """What the engine says when it refuses a draft shorter than the served context."""
        return f"context length {target_len} > draft's {draft_len}"

    # -- readiness ------------------------------------------------------------
    def phases(self, spec: ServerSpec) -> list[dict]:
        """[{name, begin, end, estimate_s}] in log order; markers as `patterns` reads them."""
        return []

    def budget(self, spec: ServerSpec, estimate_s: float) -> float:
        r = spec.readiness
        return round(max(estimate_s * r.get("phase_budget_factor", 3.0),
                         r.get("phase_budget_floor_s", 120.0)), 1)

    def readiness(self, spec: ServerSpec) -> Readiness:
        """The plan's readiness section. Fatal patterns are literal strings."""
        r = spec.readiness
        phases = [Phase(name="launch", begin=(), end=(), estimate_s=None,
                        budget_s=self.launch_budget_s)]
        for p in self.phases(spec):
            phases.append(Phase(name=p["name"], begin=patterns(p["begin"]),
                                end=patterns(p.get("end")), estimate_s=round(p["estimate_s"], 1),
                                budget_s=self.budget(spec, p["estimate_s"])))
        budgets = sum(p.budget_s for p in phases)
        return Readiness(
            probe=Probe(method="GET", path=self.health_path, interval_s=r.get("probe_interval_s", 0.1),
                        timeout_s=r.get("probe_timeout_s", 30.0),
                        success_threshold=r.get("success_threshold", 1)),
            answers=dict(self.answers),
            engine_health_timeout_s=self.health_timeout_s,
            ready_log=patterns(self.ready_line),
            phases=tuple(phases),
            fatal_patterns=tuple(literal(p) for p in self.fatal_patterns),
            estimated_start_s=round(sum(p.estimate_s or 0 for p in phases), 1),
            deadline_s=float(r.get("deadline_s") or round(budgets, 1)),
            serving_silence_s=self.serving_silence_s)

    # -- benchmarking ----------------------------------------------------------
    def cache_flush(self, spec: ServerSpec) -> CacheFlush:
        """The request that empties the prefix cache between points, or why there is none."""
        if self.flush_cache_path:
            return CacheFlush(method="POST", path=self.flush_cache_path)
        return CacheFlush(unavailable=f"{self.name} has no cache-flush endpoint")

    def acceptance(self, spec: ServerSpec) -> Acceptance | None:
        """Where a point's acceptance length is read and how (None: nothing to read)."""
        return None

    def served_model(self, spec: ServerSpec) -> str:
        return spec.model_pair["target"]["path"]

    def bench_serving_argv(self, spec: ServerSpec, *, host: str, port: int, bench: dict,
                           num_prompts: int, output_file: str) -> list[str]:
        """SGLang's own client, usable against any OpenAI-compatible server."""
        backend = self.bench_serving_backend
        dataset = {"random": "random", "sharegpt": "sharegpt", "jsonl": "custom"}[bench["dataset"]]
        rate = bench.get("request_rate")
        return ["python", "-m", "sglang.bench_serving", "--backend", backend,
                "--host", host, "--port", str(port), "--model", self.served_model(spec),
                "--dataset-name", dataset,
                *(["--dataset-path", bench["dataset_path"]] if bench.get("dataset_path") else []),
                "--random-input-len", str(bench["input_len"]),
                "--random-output-len", str(bench["output_len"]),
                "--random-range-ratio", str(bench.get("range_ratio", 1.0)),
                "--num-prompts", str(num_prompts),
                "--max-concurrency", str(bench["concurrency"]),
                "--request-rate", "inf" if rate is None else str(rate),
                "--seed", str(bench.get("seed", 0)),
                "--warmup-requests", str(bench.get("warmup_requests", 1)),
                "--output-file", output_file]

