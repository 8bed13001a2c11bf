"""What every engine adapter provides, and the parts they share.

An adapter turns a ServerSpec into a launch command, environment and
readiness plan, and states the engine's rules as data the semantic rules read
(so rules.py holds no engine facts).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specc.plan import (BENCH_SERVING_RANDOM_SOURCE, AcceptPositions, Acceptance, CacheFlush,
                        EngineInfo, Phase, Probe, Readiness, ReleaseProbe, ScheduleLag,
                        TimeDilation, literal)
from specc.secrets import split_args, split_env

if TYPE_CHECKING:  # pragma: no cover
    from specc.compile.spec import ServerSpec


_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[.-]?(post|rc|dev|a|b)(\d*))?"
                      r"(?:\+([a-z0-9]+(?:[._-][a-z0-9]+)*))?\s*$", re.IGNORECASE)
_PRE = {"dev": -3, "a": -2, "b": -1, "rc": -1, "": 0, "post": 1}


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.15.post1' -> a tuple that sorts as the releases do; ValueError if it is no version.
    A local label (PEP 440: '0.32.0+cpu', a build of that release) does not change the order."""
    m = _VERSION.match(str(text))
    if not m:
        raise ValueError(f"not a release version: {text!r}")
    nums = tuple(int(x) for x in m.group(1).split("."))
    nums += (0,) * max(0, 3 - len(nums))
    return nums + (_PRE[(m.group(2) or "").lower()], int(m.group(3) or 0))


def local_label(text: str) -> str | None:
    """A version's local label, lower case ('0.32.0+cpu' -> 'cpu'; None: a plain release)."""
    m = _VERSION.match(str(text))
    return m.group(4).lower() if m and m.group(4) else None


def for_version(version: str, table):
    """The value `table` holds for `version`.

    `table` is [(first release the value holds for, value)], newest first; a
    version older than every entry gets the oldest value.
    """
    v = parse_version(version)
    for since, value in table:
        if v >= parse_version(since):
            return value
    return table[-1][1]


#: When a phase appears (see `PhaseMarker.when`).
ALWAYS, DRAFT, MULTI_STEP = "always", "draft", "multi_step"

#: Placeholders in a multi-node server's argv, filled in on each node by specc.run.rank:
#: the node's rank, the first node's address.
NODE_RANK, HEAD = "{node_rank}", "{head}"


@dataclass(frozen=True)
class PhaseMarker:
    """One startup phase as one engine release logs it: data, not code.

    `begin` / `end`: regular expressions (Python `re.search`); any one of them
    marks the phase's first / last line. `samples`: lines this release really
    prints there (rebuilt from its source), which the patterns must match and
    the simulator prints. `evidence`: (file in the engine's package, literal
    text) pairs that must be in that release's source (checked by
    tests/drift). `when`: ALWAYS, DRAFT (a draft model is loaded) or
    MULTI_STEP (a draft model and num_steps > 1).
    """

    name: str
    begin: tuple[str, ...]
    end: tuple[str, ...] = ()
    when: str = ALWAYS
    samples: tuple[str, ...] = ()
    evidence: tuple[tuple[str, str], ...] = ()

    def applies(self, *, draft: bool, num_steps: int | None) -> bool:
        if self.when == DRAFT:
            return draft
        if self.when == MULTI_STEP:
            return draft and (num_steps or 0) > 1
        return True


@dataclass(frozen=True)
class FatalMessage:
    """A log line the engine dies of: a fatal pattern, and the source that proves it.

    `text`: what the line contains (a literal). `source`: the file in the engine's
    package that prints it. `printed`: that file's text printing it together with what
    ends the process next (a signal to the parent, a kill, a raise): tests/drift finds
    it verbatim. `exits`: how the process dies after it, in words. Exception lines and
    "Traceback" are never fatal patterns: engines log tracebacks under warnings and
    carry on (a stale-shm sweep, a graph fallback); a real crash ends the process,
    and its exit names the cause (specc.run.readiness).
    """

    text: str
    source: str
    printed: str
    exits: str


def patterns(marker) -> tuple[str, ...]:
    """An adapter's log marker as the plan's regexes: a plain string is a literal, a
    list holds regexes (one per wording an engine release printed), None is none."""
    if marker is None:
        return ()
    if isinstance(marker, str):
        return (literal(marker),)
    return tuple(marker)


def drop_flags(argv, flags) -> list[str]:
    """`argv` without each of `flags` and its value (`--flag value` or `--flag=value`)."""
    out: list[str] = []
    skip = False
    for a in argv:
        a = str(a)
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if a.split("=", 1)[0] in flags and "=" in a:
            continue
        out.append(a)
    return out


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
    """Base adapter. Subclasses set the facts and implement `argv`.

    An adapter instance is bound to one engine release (`version`, default
    the pinned one): facts that changed between releases are looked up for it.
    """

    name = "engine"
    #: How every server of this engine starts (the engine's own program): `argv` begins with
    #: it, and a plan whose command does not is refused before it runs.
    launcher: tuple[str, ...] = ()
    #: The script that checks launch commands with the engine's own parser (specc/engines/parsers).
    parser = ""
    #: The distribution whose installed release the preflight compares with `version`
    #: (None: the engine is specc's own).
    package: str | None = None
    #: The launch flag that sets the key the server's API routes require.
    api_key_flag = "--api-key"
    #: The release every fact was last read from (the drift check verifies it).
    pinned_version = ""
    #: The oldest release specc holds facts for.
    oldest_version = ""
    version_read = ""
    #: The engine's own default port (a fact; specc plans from engine.base_port, 31000,
    #: away from every engine's default).
    default_port = 30000
    health_path = "/health"
    health_timeout_s = 0.0
    #: Where a running server says its release ({"paths": [...], "field": dotted key});
    #: the run manifest records the answer next to the pinned release. None: it does not.
    release_probe: dict | None = None
    ready_line: str | None = None
    #: The lines the engine dies of, each with its source (see FatalMessage).
    fatal_messages: tuple[FatalMessage, ...] = ()
    #: "error": startup dies when the draft's context is shorter; "cap": silently capped.
    draft_context_policy = "error"
    #: The environment variable that turns that startup error into a warning.
    context_override_env: str | None = None
    #: topk == 1 silently resets num_draft_tokens to num_steps + 1.
    rewrites_topk1_draft_tokens = False
    #: NGRAM's topk and num_steps are the engine's own (given ones are not passed).
    resolves_ngram_knobs = False
    #: max running requests when speculation is on and none is given (None: no cap).
    spec_default_max_running: int | None = None
    #: Budget for the launch pseudo-phase: process start to the first phase marker.
    launch_budget_s = 300.0
    #: What each probe answer means while starting.
    answers = {"refused": "starting", "503": "warming", "200": "ready"}
    #: While requests are in flight the engine logs progress at least this often;
    #: a log silent this long during a benchmark means a wedged server.
    serving_silence_s = 60.0
    #: The request field the engine takes as the request's own id (None: the client sets none).
    #: specc's ids carry the prompt's category (the simulator reads it; engines only echo it).
    request_id_field: str | None = None
    #: Where the engine counts accepted draft tokens per position (specc/run/positions.py):
    #: None: nowhere.
    accept_positions: AcceptPositions | None = None
    #: Endpoint that drops the prefix cache between points (POST; None: not supported).
    flush_cache_path: str | None = None
    #: Server environment that endpoint needs (set when a point flushes the cache).
    flush_cache_env: dict[str, str] = {}
    #: One server can span nodes (on Slurm): argv takes the rendezvous port and carries
    #: NODE_RANK and HEAD, which each node fills in (specc.run.rank).
    multinode = False
    #: Spanning nodes, rank 0 waits here for every node (the readiness plan's first phase).
    join_phase: PhaseMarker | None = None
    #: Each engine-neutral server knob (config `server`, every key) -> this engine's flag:
    #: a flag, or [(first release it holds for, flag)] newest first (see `for_version`).
    server_flags: dict = {}
    #: Runs on GPUs (False: nothing to check for other GPU holders).
    uses_gpus = True
    #: Has a CPU build specc can drive (hardware.device=cpu; `cpu_env` sets it up), and
    #: the host memory that build takes beyond weights and KV cache.
    cpu_build = False
    cpu_reserved_gb = 0.0
    #: `--backend` of SGLang's bench_serving for this engine.
    bench_serving_backend = "sglang"
    #: Target architectures allowed per algorithm (None: any).
    algorithm_targets: dict[str, tuple[str, ...]] = {}
    #: The fix to suggest when `algorithm_targets` refuses the target.
    target_unsupported_fix = "use another engine or algorithm for this pair"
    #: Tree speculation (topk, a draft-token budget); False: a chain of num_steps tokens.
    tree_speculation = True
    #: Picks num_steps/topk/num_draft_tokens per target architecture when none are given;
    #: False: the config must say how many tokens to draft (SPEC_TOKENS_REQUIRED).
    picks_spec_params = True

    def __init__(self, version: str | None = None):
        self.version = str(version) if version else self.pinned_version
        parse_version(self.version)   # ValueError for a malformed one (the schema refuses it first)

    def num_speculative_tokens(self, spec) -> int | None:
        """Tokens drafted per step by an engine that drafts a chain (`tree_speculation` or
        `picks_spec_params` False: the compile rules ask it); None: the config gives none."""
        raise NotImplementedError(f"{type(self).__name__} drafts a chain: it must say how many tokens")

    def version_note(self) -> str | None:
        """Why this version's facts are not verified (None: they are)."""
        if self.version == self.pinned_version:
            return None
        v = parse_version(self.version)
        if v > parse_version(self.pinned_version):
            return (f"{self.name} {self.version} is newer than {self.pinned_version}, the release "
                    f"specc's {self.name} facts were read from; they may have drifted")
        if self.oldest_version and v < parse_version(self.oldest_version):
            return (f"{self.name} {self.version} is older than {self.oldest_version}, the oldest "
                    f"release specc holds {self.name} facts for")
        return None

    @property
    def fatal_patterns(self) -> tuple[str, ...]:
        """The plan's fatal patterns: each fatal message as a literal regex."""
        return tuple(literal(m.text) for m in self.fatal_messages)

    def info(self) -> EngineInfo:
        """What the plan records about the engine (plan.json engine_info): all that running
        the plan needs of this adapter."""
        return EngineInfo(version=self.version, pinned_version=self.pinned_version,
                          version_read=self.version_read, health_path=self.health_path,
                          uses_gpus=self.uses_gpus, health_timeout_s=self.health_timeout_s,
                          launcher=self.launcher, parser=self.parser, package=self.package,
                          release_probe=None if self.release_probe is None else ReleaseProbe(
                              tuple(self.release_probe["paths"]), self.release_probe["field"]))

    # -- launch ---------------------------------------------------------------
    @abstractmethod
    def argv(self, spec: ServerSpec, *, host: str, port: int,
             rendezvous_port: int | None = None) -> list[str]:
        """The server's launch command (rank 0's, spanning nodes: `rendezvous_port` is the
        head's port the ranks meet at, planned for a server of more than one node)."""

    def api_key(self, argv: list[str]) -> str | None:
        """The API key a launch command sets (as written: a secret is a `${NAME}` reference by
        now), which clients must send; None: the server takes requests without one."""
        key = None
        for i, a in enumerate(argv):
            a = str(a)
            if a == self.api_key_flag and i + 1 < len(argv):
                key = str(argv[i + 1])
            elif a.startswith(self.api_key_flag + "="):
                key = a.split("=", 1)[1]
        return key

    def server_flag(self, knob: str) -> str:
        """This release's flag for a server knob."""
        flag = self.server_flags[knob]
        return flag if isinstance(flag, str) else for_version(self.version, flag)

    def server_value(self, spec: ServerSpec, knob: str):
        """The value this engine's flag takes for a server knob (None: not set, so no flag and
        the engine's own default)."""
        return spec.server.get(knob)

    def server_args(self, spec: ServerSpec) -> list[str]:
        """The flags of the server knobs the config sets, nothing for the others."""
        return flag_args([(self.server_flag(k), self.server_value(spec, k))
                          for k in self.server_flags])

    def follower_args(self, spec: ServerSpec) -> list[str]:
        """What ranks other than 0 of a multi-node server add to `argv`."""
        return []

    def pp_speculation_refusal(self, spec: ServerSpec) -> tuple[str, str] | None:
        """(why, fix) where this release refuses spec's speculation with pipeline
        parallelism (asked only with pp > 1 and speculation on); None: it serves it."""
        return None

    def multinode_problems(self, spec: ServerSpec) -> list[tuple[str, str, str]]:
        """(config path, message, fix) for each reason the engine refuses this server
        across spec.nodes nodes at launch (asked only of a multi-node server on Slurm)."""
        return []

    def env(self, spec: ServerSpec, gpus: list[int], *,
            flush_cache: bool = False) -> tuple[dict[str, str], list[str]]:
        """(env for the server, names of secrets referenced rather than written: in the
        env and in extra_args, which compile has already turned into references).

        `flush_cache`: some benchmark point on this server drops the prefix cache.
        """
        env = self.cpu_env(spec) if spec.on_cpu else {
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        values, secrets = split_env(spec.engine.get("env") or {})
        env.update((k, str(v)) for k, v in values.items())   # an environment holds strings
        if flush_cache:
            for name, value in self.flush_cache_env.items():
                env.setdefault(name, value)
        _, in_args, _ = split_args(spec.engine.get("extra_args") or [])
        return env, secrets + [n for n in in_args if n not in secrets]

    def cpu_env(self, spec: ServerSpec) -> dict[str, str]:
        """What the engine's CPU build reads from its environment (hardware.device=cpu;
        only engines with `cpu_build`)."""
        return {}

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

    def default_max_running(self, spec: ServerSpec) -> int | None:
        """Running-request cap when none is configured and no speculation default applies."""
        return None

    def draft_context_rule(self, spec: ServerSpec, draft_len: int,
                           served: int) -> tuple[str, str, str]:
        """(code, message, hint) of the warning for a draft shorter than the served
        context, where the engine does not refuse it (draft_context_policy != "error")."""
        return ("CONTEXT_DRAFT_CAPPED",
                f"{self.name} silently caps the draft's context to {draft_len} while the "
                f"target serves {served}; acceptance past {draft_len} tokens may collapse",
                f"set model_pair.context_length={draft_len} to serve what the draft was trained on")

    def max_draft_tokens(self, num_steps: int, topk: int) -> int | None:
        """Most draft tokens a tree of num_steps x topk can verify (None: no tree)."""
        return None

    def schedule_format(self, argv: list[str], *, dp: int, algorithm: str | None) -> dict:
        """How this release takes a batch-size schedule of speculation, as data the tuner
        fills in after its search (plan.json search.schedule_format, docs/tune.md "Deploy"):
        `kind` (None: no schedule), `why_not`, `chains_only`, `no_draft_band` (where
        given: why a band cannot run as the baseline does, without speculation), `varies`,
        `routing`, and the launch template built from a candidate's `argv`. The base: no
        schedule."""
        return {"kind": None, "release": f"{self.name} {self.version}",
                "why_not": f"{self.name} {self.version} takes no batch-size schedule",
                "chains_only": True, "varies": "", "routing": ""}

    def source_evidence(self) -> list[tuple[str, str, str]]:
        """(fact, file in the package, text) for every marker, metric and endpoint the
        adapter relies on, as the pinned release says them; a text starting with "!"
        must be absent. Checked against the real release by tests/drift."""
        return []

    def startup_context_error(self, target_len: int, draft_len: int) -> str:
        """What the engine says when it refuses a draft shorter than the served context."""
        return f"context length {target_len} > draft's {draft_len}"

    def speculation_label(self, spec: ServerSpec) -> str:
        """What a speculative server runs, for its label: `EAGLE3 s3 k1 d4` (steps, topk,
        draft tokens), `NGRAM d8` (the engine resolves NGRAM's steps and topk from its draft
        tokens), `EAGLE3 (engine defaults)`."""
        steps, topk, ndt = spec.spec_triple
        if spec.algorithm == "NGRAM":
            return f"NGRAM d{ndt}"
        if steps is None:
            return f"{spec.algorithm} (engine defaults)"
        return f"{spec.algorithm} s{steps} k{topk} d{ndt}"

    # -- readiness ------------------------------------------------------------
    def phase_markers(self) -> tuple[PhaseMarker, ...]:
        """This release's startup phases, in log order (all of them; see `phases`)."""
        return ()

    def startup_markers(self, spec: ServerSpec) -> tuple[PhaseMarker, ...]:
        """The phases this server's startup logs: this release's, unless the server's own
        build or settings log another startup (vLLM's CPU build)."""
        return self.phase_markers()

    def phase_estimates(self, spec: ServerSpec) -> dict[str, float]:
        """Estimated seconds per phase name."""
        return {}

    def phases(self, spec: ServerSpec) -> list[dict]:
        """[{name, begin, end, estimate_s}] in log order, for this server.

        `begin` / `end` are lists of regular expressions (any one matches).
        """
        est = self.phase_estimates(spec)
        steps = spec.speculation.get("num_steps")
        markers = [m for m in self.startup_markers(spec)
                   if m.applies(draft=spec.uses_draft_model, num_steps=steps)]
        if spec.nodes > 1 and self.join_phase:   # a multi-node server first waits for its nodes
            markers.insert(0, self.join_phase)
        return [{"name": m.name, "begin": list(m.begin), "end": list(m.end),
                 "estimate_s": est.get(m.name, 5.0 if m is self.join_phase else 1.0)}
                for m in markers]

    def budget(self, spec: ServerSpec, estimate_s: float, phase: str = "") -> float:
        """Seconds of log silence a phase may take: readiness.phase_budgets_s[phase] if set,
        else its estimate x phase_budget_factor, at least phase_budget_floor_s."""
        r = spec.readiness
        given = (r.get("phase_budgets_s") or {}).get(phase)
        if given is not None:
            return round(float(given), 1)
        return round(max(estimate_s * r["phase_budget_factor"], r["phase_budget_floor_s"]), 1)

    def readiness(self, spec: ServerSpec) -> Readiness:
        """The plan's readiness section. Fatal patterns are literal strings."""
        r = spec.readiness
        phases = [Phase(name="launch", begin=(), end=(), estimate_s=None,
                        budget_s=self.launch_budget_s)]
        for p in self.phases(spec):
            phases.append(Phase(name=p["name"], begin=patterns(p["begin"]),
                                end=patterns(p.get("end")), estimate_s=round(p["estimate_s"], 1),
                                budget_s=self.budget(spec, p["estimate_s"], p["name"])))
        budgets = sum(p.budget_s for p in phases)
        return Readiness(
            probe=Probe(method="GET", path=self.health_path, interval_s=r["probe_interval_s"],
                        timeout_s=r["probe_timeout_s"], success_threshold=r["success_threshold"]),
            answers=dict(self.answers),
            engine_health_timeout_s=self.health_timeout_s,
            ready_log=patterns(self.ready_line),
            phases=tuple(phases),
            fatal_patterns=self.fatal_patterns,
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

    def schedule_lag(self, spec: ServerSpec) -> ScheduleLag | None:
        """Where a server that runs in real time says how far it fell behind its schedule
        during a point, and the bound past which the point is not valid (None: a real
        engine's time is the GPU's, nothing to check)."""
        return None

    def time_dilation(self, spec: ServerSpec) -> TimeDilation | None:
        """Where a server whose clock is modelled (the simulator) is told to run a point
        slower than modelled (None: a real engine runs at the GPU's pace)."""
        return None

    def point_time_dilation(self, spec: ServerSpec, concurrency: int | None, input_len: int,
                            output_len: int, num_prompts: int) -> float:
        """The factor one point of this server runs at (1: real time)."""
        return 1.0

    def served_model(self, spec: ServerSpec) -> str:
        return spec.model_pair["target"]["path"]

    def bench_serving_argv(self, spec: ServerSpec, *, host: str, port: int, bench: dict,
                           num_prompts: int, output_file: str) -> list[str]:
        """SGLang's own client, usable against any OpenAI-compatible server."""
        backend = self.bench_serving_backend
        # a prompt set has no bench_serving name: BENCH_DRIVER_DATASET refuses the plan
        dataset = {"random": "random", "sharegpt": "sharegpt", "jsonl": "custom"}.get(
            bench["dataset"], bench["dataset"])
        rate = bench.get("request_rate")
        path = bench.get("dataset_path")
        if dataset == "random" and not path:
            # 0.5.23's random dataset samples token ids from ShareGPT and downloads it from
            # the Hub when --dataset-path is no JSON file (benchmark/datasets/random.py):
            # offline that fails. The run writes this file first (specc.prompts.datasets).
            path = BENCH_SERVING_RANDOM_SOURCE
        return ["python", "-m", "sglang.bench_serving", "--backend", backend,
                "--host", host, "--port", str(port), "--model", self.served_model(spec),
                "--dataset-name", dataset,
                *(["--dataset-path", path] if path else []),
                "--random-input-len", str(bench["input_len"]),
                "--random-output-len", str(bench["output_len"]),
                "--random-range-ratio", str(bench["range_ratio"]),
                "--num-prompts", str(num_prompts),
                "--max-concurrency", str(bench["concurrency"]),
                "--request-rate", "inf" if rate is None else str(rate),
                "--seed", str(bench["seed"]),
                "--warmup-requests", str(bench["warmup_requests"]),
                "--output-file", output_file]

