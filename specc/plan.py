"""The Plan: one immutable value, compiled once, reviewed, then executed as written.

plan.json is the whole runtime contract: launch commands, the readiness plan
(probe, health semantics, log patterns, phase budgets), the cache-flush
request and the acceptance recipe are all in it, so the executor (or a Slurm
node, or a remote host) needs nothing but the plan and never an engine adapter.

Every type here is a frozen dataclass; its field annotations are the schema.
`to_json` / `from_json` are defined once (on `Record`) and read strictly: a
wrong plan is a `PlanError` naming the path (`servers[0].readiness.probe.path:
missing`), never a KeyError.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import typing
from collections import Counter
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path, PurePosixPath

from specc.diagnostics import Diagnostic
from specc.facts import ModelFacts
from specc.records import PlanError, Record, _kind, _load

#: bench_serving's random dataset's ShareGPT-format source, relative to the run dir: a
#: benchmark's argv names it, the run (or plan.sh) writes it before the client starts
#: (specc.prompts.datasets.write_sharegpt_source), so the client never downloads ShareGPT.
BENCH_SERVING_RANDOM_SOURCE = "bench_serving/random_source.json"

#: 2: typed readiness (log markers are regex lists), cache flush and acceptance per server.
PLAN_VERSION = 2

#: The parse scripts a plan may name (engine_info.parser): the preflight runs one.
PARSER_MODULE = re.compile(r"specc\.engines\.parsers\.[a-z][a-z0-9_]*")

#: What a probe answer may mean while a server starts.
ANSWER_MEANINGS = ("starting", "warming", "ready", "dead")


#: What an id that names a file in the run dir may be (requests/<point>.jsonl, <job>.sbatch).
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@,\-]*\Z")
#: Names joined by NUL, each a _SAFE_NAME (10^5 benchmark ids checked in one match).
_SAFE_NAMES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@,\-]*(?:\0[A-Za-z0-9_][A-Za-z0-9_.+=@,\-]*)*")


def _inside(rel: str) -> bool:
    """A path relative to the run dir that stays inside it (no `..`, not absolute)."""
    p = PurePosixPath(rel)
    return bool(rel) and "\0" not in rel and not p.is_absolute() and ".." not in p.parts


def _outside_run_dir(plan) -> list[str]:
    """Every path the executor writes from a plan.json must stay inside the run dir: a
    hand-edited `../../x` or absolute server log, id or script is refused."""
    out = [f"server {s.id!r}: log {s.log!r} is not a path inside the run dir"
           for s in plan.servers if not _inside(s.log)]
    out += [f"server {s.id!r}: its id is not a plain file name" for s in plan.servers
            if not _SAFE_NAME.match(s.id)]
    ids = [b.id for b in plan.benchmarks]
    joined = "\0".join(ids)   # all at once, unless an id holds the NUL itself
    if ids and not (joined.count("\0") == len(ids) - 1 and _SAFE_NAMES.fullmatch(joined)):
        out += [f"benchmark {i!r}: its id is not a plain file name" for i in ids
                if not _SAFE_NAME.match(i)]
    for j in plan.cluster.jobs if plan.cluster is not None else ():
        if not _SAFE_NAME.match(j.name):
            out.append(f"cluster job {j.name!r}: its name is not a plain file name")
        if not _inside(j.script):
            out.append(f"cluster job {j.name}: script {j.script!r} is not a path inside the run dir")
    return out[:5]


def _repeated_ids(plan, server_ids: set, bench_ids: set) -> list[str]:
    """Every id names one server or one point: two points sharing an id would share one
    result row and one requests file (the figures of one reported for both)."""
    out = []
    if len(server_ids) != len(plan.servers):
        out += [f"server id {i!r} appears {n} times" for i, n in
                Counter(s.id for s in plan.servers).items() if n > 1]
    if len(bench_ids) != len(plan.benchmarks):
        out += [f"benchmark id {i!r} appears {n} times" for i, n in
                Counter(b.id for b in plan.benchmarks).items() if n > 1]
    return out[:5]


#: plan.json's last keys: the sha256 of every byte before it (the reviewed plan, as written),
#: then the seal (an HMAC of the same bytes under the user's key: specc/seal.py).
_DIGEST_TAIL = re.compile(rb',\n"digest":"(sha256:[0-9a-f]{64})"(?:,\n"seal":"hmac-sha256:[0-9a-f]{64}")?\}\n\Z')


def digest_of(body: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(body).hexdigest()


def digest_check(data: bytes) -> tuple[str | None, bool]:
    """(the digest plan.json records, whether its bytes still match it): False when it was
    edited after it was compiled (and reviewed), or carries no digest."""
    m = _DIGEST_TAIL.search(data, max(0, len(data) - 200))
    if m is None:
        return None, False
    return m.group(1).decode(), digest_of(data[:m.start()]) == m.group(1).decode()


_REGEX_SPECIAL = re.compile(r"([\\.^$*+?{}\[\]|()])")


def literal(text: str) -> str:
    """A regex matching `text` as written (only regex syntax escaped: readable in plan.json)."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


def _bad_patterns(where: str, patterns) -> list[str]:
    out = []
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            out.append(f"{where}: {p!r} is not a valid regular expression ({e})")
    return out


# -- readiness ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe(Record):
    """One health request at a time: never two in flight, each with its own timeout."""
    method: str
    path: str
    interval_s: float
    timeout_s: float
    #: Consecutive answers meaning "ready" needed.
    success_threshold: int

    def _check(self):
        out = []
        if not self.path.startswith("/"):
            out.append(f"path {self.path!r} must start with '/'")
        if self.interval_s <= 0 or self.timeout_s <= 0:
            out.append("interval_s and timeout_s must be > 0")
        if self.success_threshold < 1:
            out.append("success_threshold must be >= 1")
        return out


@dataclass(frozen=True)
class Phase(Record):
    """A startup phase: begins at the first log line matching one of `begin` (regexes;
    none: at process start). `end` patterns tell a repeat of this phase's own begin
    marker (another rank) from the next phase that shares it (the draft's weights).
    `budget_s`: the longest the log may stay silent in this phase."""
    name: str
    begin: tuple[str, ...]
    end: tuple[str, ...]
    estimate_s: float | None
    budget_s: float

    def _check(self):
        out = _bad_patterns(f"phase {self.name} begin", self.begin)
        out += _bad_patterns(f"phase {self.name} end", self.end)
        if self.budget_s <= 0:
            out.append(f"phase {self.name}: budget_s must be > 0")
        return out


@dataclass(frozen=True)
class Readiness(Record):
    """How the executor decides a server is ready, stuck or dead (all patterns are regexes)."""
    probe: Probe
    #: probe answer ("refused", "timeout", an HTTP status) -> one of ANSWER_MEANINGS;
    #: an answer not listed means "warming" (the server answered something).
    answers: dict[str, str]
    #: The engine's own health-check time (a shorter probe timeout would misread it).
    engine_health_timeout_s: float
    ready_log: tuple[str, ...]
    phases: tuple[Phase, ...]
    fatal_patterns: tuple[str, ...]
    estimated_start_s: float
    deadline_s: float
    #: While a point runs, a log silent this long means a wedged server (None: not watched).
    serving_silence_s: float | None

    def _check(self):
        out = _bad_patterns("ready_log", self.ready_log)
        out += _bad_patterns("fatal_patterns", self.fatal_patterns)
        out += [f"answers.{k}: {v!r} is not one of {', '.join(ANSWER_MEANINGS)}"
                for k, v in self.answers.items() if v not in ANSWER_MEANINGS]
        if not self.phases:
            out.append("phases: at least one phase (the launch)")
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            out.append("phases: names must be unique")
        if self.deadline_s <= 0:
            out.append("deadline_s must be > 0")
        return out


# -- benchmarking ----------------------------------------------------------------------
@dataclass(frozen=True)
class CacheFlush(Record):
    """The request that empties the server's prefix cache between points, or why there is none."""
    method: str | None = None
    path: str | None = None
    #: Why the cache is not flushed (set exactly when there is no request).
    unavailable: str | None = None

    def _check(self):
        if (self.method is None) != (self.path is None):
            return ["method and path go together"]
        if (self.path is None) == (self.unavailable is None):
            return ["either a request (method, path) or the reason it is unavailable"]
        return []


@dataclass(frozen=True)
class CounterRatio(Record):
    """Run-scoped acceptance from two reads of Prometheus counters at `path`:
    accept = offset + delta(numerator) / delta(denominator)."""
    path: str
    numerator: str
    denominator: str
    offset: float = 0.0


@dataclass(frozen=True)
class ServerField(Record):
    """A figure the server keeps itself, read once after the point (scope: `scope`).
    `field` is a dotted path into the JSON answer; a number indexes a list."""
    paths: tuple[str, ...]
    field: str
    scope: str = "cumulative"

    def _check(self):
        return [] if self.paths else ["paths: at least one endpoint"]


@dataclass(frozen=True)
class Acceptance(Record):
    """How to read a point's acceptance length: `run` when its counters answer, else `cumulative`."""
    run: CounterRatio | None = None
    cumulative: ServerField | None = None

    def _check(self):
        return [] if (self.run or self.cumulative) else ["a run or a cumulative source"]


@dataclass(frozen=True)
class ScheduleLag(Record):
    """How far a server that runs in real time (the simulator) fell behind its own step
    schedule during a point: `histogram`, a Prometheus histogram of its steps' lateness
    (s) at `path`, read before and after the point, and `worst`, its gauge of the latest
    step since start. A point during which a step was delivered later than its bound,
    `bound_fraction` of the point's duration but never under `bound_s`, measured the
    machine's CPU, not the model: it is measured once more, then failed
    (docs/simulator.md)."""
    path: str
    histogram: str
    worst: str
    bound_s: float
    bound_fraction: float

    def bound(self, duration_s: float | None) -> float:
        """The lateness a point of this duration tolerates (s)."""
        return max(self.bound_s, self.bound_fraction * (duration_s or 0.0))

    def _check(self):
        return [] if self.bound_s > 0 and self.bound_fraction >= 0 else [
            "bound_s must be > 0 and bound_fraction >= 0"]


@dataclass(frozen=True)
class TimeDilation(Record):
    """Where a point runner sets a simulated server's time dilation before a point (POST
    `{"factor": s}` to `path`): every modelled duration then runs s times slower and the
    point's measured times are divided by s (docs/simulator.md)."""
    path: str


# -- the engine ----------------------------------------------------------------------------
def launches_with(argv, launcher) -> bool:
    """`argv` starts with the engine's own launcher: its program by name (found on PATH), or
    by absolute path to a file of that name (the program in the configured engine
    environment, e.g. `<venv>/bin/vllm` for engine.python `<venv>/bin/python`)."""
    argv, launcher = tuple(argv), tuple(launcher)
    if argv[:len(launcher)] == launcher:
        return True
    if not argv or not launcher or argv[1:len(launcher)] != launcher[1:]:
        return False
    program = PurePosixPath(str(argv[0]))
    return program.is_absolute() and program.name == launcher[0]


@dataclass(frozen=True)
class ReleaseProbe(Record):
    """Where a running server says its release: GET each of `paths` until one answers a
    JSON object, and read `field` (a dotted key) from it."""
    paths: tuple[str, ...]
    field: str = "version"


@dataclass(frozen=True)
class EngineInfo(Record):
    """What running the plan needs to know of its engine, written by the engine's adapter at
    compile time: the process that runs a plan imports no adapter (docs/architecture.md)."""
    version: str
    pinned_version: str
    version_read: str
    health_path: str
    uses_gpus: bool
    health_timeout_s: float
    #: The engine's own launcher: every server's argv starts with it, and `specc run --plan`
    #: refuses a plan whose command does not (`sh -c ...` with valid flags after it).
    launcher: tuple[str, ...]
    #: The module (a script, run as a file under the engine's Python, see
    #: specc/engines/parsers) that feeds launch commands to the engine's own parser.
    parser: str
    #: The distribution whose installed release must be `version` (None: specc's own).
    package: str | None = None
    #: Where a running server says its release (None: it does not); the run manifest
    #: records the answer (specc/run/provenance.py).
    release_probe: ReleaseProbe | None = None

    def _check(self):
        out = [] if self.launcher else ["launcher: at least the program"]
        if not PARSER_MODULE.fullmatch(self.parser):   # the preflight runs it: only specc's own
            out.append(f"parser {self.parser!r} is not a module of specc.engines.parsers")
        return out


# -- parameters: what a server and a client point are, as the config said them -------------
#: What each annotation of a Params record lets a JSON value be (the config's own types: a
#: JSON number stays as written, 600 is not rewritten 600.0).
_PARAM_TYPES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float),
                "tuple[str, ...]": (list, tuple)}
_PARAM_WORDS = {"str": "a string", "int": "an integer", "bool": "true or false",
                "float": "a number", "tuple[str, ...]": "a list of strings"}


class Params(Record):
    """A flat, frozen record of parameters: every key is required, none unknown, each of
    its type (`read`, one pass per point, no per-field recursion: a plan has 10^5 of them).
    Built by the compiler from a schema-checked config, so construction checks nothing."""

    __slots__ = ()

    def __post_init__(self):   # the config's values as written (no int -> float)
        pass

    @classmethod
    def _layout(cls):
        """(field names, their allowed types, the word for each, a getter of all of them)."""
        got = cls.__dict__.get("_LAYOUT")
        if got is None:
            names = tuple(f.name for f in fields(cls) if f.name != "axes")
            specs = []
            for f in fields(cls):
                if f.name == "axes":
                    continue
                ann = str(f.type).replace(" ", "").replace(",", ", ")
                optional = ann.endswith("|None")
                base = ann[:-5] if optional else ann
                record = globals().get(base)   # a nested record: read by its own reader
                allowed: tuple[type, ...]
                convert: typing.Callable | None
                if isinstance(record, type) and issubclass(record, Record):
                    allowed, word = (dict,), "an object"
                    convert = functools.partial(_load, record)
                else:
                    allowed, word = _PARAM_TYPES[base], _PARAM_WORDS[base]
                    convert = _strings if base == "tuple[str, ...]" else None
                if optional:
                    allowed, word = allowed + (type(None),), word + " or null"
                specs.append((f.name, allowed, word, convert))
            got = (names, frozenset(names), tuple(specs), operator.attrgetter(*names))
            setattr(cls, "_LAYOUT", got)  # noqa: B010  one per subclass, unknown to the type checker
        return got

    def to_json(self) -> dict:
        names, _, _, get = self._layout()
        return dict(zip(names, get(self)))

    @classmethod
    def _extra(cls, value: dict, path: str) -> dict:
        """Keys beyond the fields (none, but for ServerParams' swept config paths)."""
        unknown = sorted(set(value) - cls._layout()[1])
        if unknown:
            raise PlanError(f"{path}.{unknown[0]}: unknown key (not a parameter specc writes)")
        return {}

    @classmethod
    def read(cls, value, path: str):
        """The strict reader: PlanError naming the first missing, unknown or mistyped key."""
        if type(value) is not dict:
            raise PlanError(f"{path}: expected an object, got {_kind(value)}")
        _, names, specs, _ = cls._layout()
        kwargs = cls._extra(value, path) if len(value) != len(names) or value.keys() != names \
            else {}
        for name, allowed, word, convert in specs:
            try:
                v = value[name]
            except KeyError:
                default = cls.__dataclass_fields__[name].default
                if default is MISSING:
                    raise PlanError(f"{path}.{name}: missing") from None
                v = default   # a field with a default may be left out (BenchParams' workloads)
            if type(v) not in allowed:
                raise PlanError(f"{path}.{name}: expected {word}, got {_kind(v)}")
            if convert is not None and v is not None:
                v = convert(v, f"{path}.{name}")
            kwargs[name] = v
        obj = cls(**kwargs)
        problems = obj._check()
        if problems:
            raise PlanError(f"{path}: {'; '.join(problems)}")
        return obj


def _strings(value, path: str) -> tuple[str, ...]:
    if not all(type(x) is str for x in value):
        raise PlanError(f"{path}: expected a list of strings")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class AcceptPositions(Record):
    """Where the engine counts acceptance per draft position (vLLM): two Prometheus
    counters at `path`, the accepted tokens labelled by position (specc/run/positions.py)."""
    path: str
    label: str
    accepted: str
    drafts: str


@dataclass(frozen=True, slots=True)
class ServerParams(Params):
    """What a server is: its model pair, parallelism and speculative setting, and the swept
    config values that name it beyond those (`axes`, by config path)."""
    target: str
    draft: str | None
    tp: int
    dp: int
    pp: int
    algorithm: str | None
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None
    context_length: int | None
    #: Swept values outside speculation, e.g. (("server.max_running_requests", 512),): written
    #: after the fields, one key each (a config path: always dotted); JSON values as swept.
    axes: tuple[tuple[str, typing.Any], ...] = ()

    def to_json(self) -> dict:
        out = Params.to_json(self)
        out.update(self.axes)
        return out

    @classmethod
    def _extra(cls, value: dict, path: str) -> dict:
        names = cls._layout()[1]
        axes = tuple((k, v) for k, v in value.items() if k not in names)
        bad = [k for k, _ in axes if "." not in k]
        if bad:
            raise PlanError(f"{path}.{bad[0]}: unknown key (a server parameter, or a swept "
                            "config path such as server.max_running_requests)")
        return {"axes": axes}

    def _check(self):
        return [f"{k} must be >= 1" for k in ("tp", "dp", "pp") if getattr(self, k) < 1]


@dataclass(frozen=True, slots=True)
class BenchParams(Params):
    """A client point as run: the config's `benchmark` section resolved for the point
    (conf/benchmark/default.yaml says each default, docs/plan-json.md each field), and
    what the server's engine adds (the served model, its request-id field, where its
    per-position acceptance is read)."""
    driver: str
    api: str
    dataset: str
    dataset_path: str | None
    input_len: int
    output_len: int
    range_ratio: float
    num_prompts: int
    concurrency: int
    request_rate: float | None
    warmup_requests: int
    flush_cache: bool
    seed: int
    timeout_s: float
    categories: tuple[str, ...] | None
    hf_dataset: str | None
    hf_subset: str | None
    hf_split: str
    temperature: float
    ignore_eos: bool
    min_requests: int
    min_output_tokens: int
    repeats: int
    target_ci: float | None
    max_requests: int
    model: str
    request_id_field: str | None
    accept_positions: AcceptPositions | None
    # workloads (docs/workloads.md): absent from plan.json at these neutral values, so a
    # plan that uses none of them keeps its ids and text (specc.compile.matrix.NEUTRAL_WORKLOAD)
    burstiness: float | None = None   # arrivals: null = Poisson
    ramp_s: float | None = None
    multi_turn: bool = False
    shared_prefix_len: int = 0
    shared_prefix_groups: int = 1

    OMITTED_AT_DEFAULT = ("burstiness", "ramp_s", "multi_turn", "shared_prefix_len",
                          "shared_prefix_groups")

    def to_json(self) -> dict:
        out = Params.to_json(self)
        for key in self.OMITTED_AT_DEFAULT:
            if out[key] == BenchParams.__dataclass_fields__[key].default:
                del out[key]
        if self.categories is not None:
            out["categories"] = list(self.categories)
        if self.accept_positions is not None:
            out["accept_positions"] = self.accept_positions.to_json()
        return out

    def _check(self):
        out = [f"{k} must be >= 1" for k in ("num_prompts", "concurrency", "repeats")
               if getattr(self, k) < 1]
        if self.driver not in ("builtin", "bench_serving"):
            out.append(f"driver {self.driver!r} is neither 'builtin' nor 'bench_serving'")
        return out


# -- the plan ----------------------------------------------------------------------------
def point_label(server_label: str, server_id: str, concurrency: object) -> str:
    """A point's name as specc prints it: its server's label (else its id) at its client
    concurrency, `EAGLE3 s3 k1 d4 @ c=2`. Only ever printed: points are matched by what
    they measure (specc.report.compare.point_key), never by this text."""
    return f"{server_label or server_id} @ c={concurrency}"


@dataclass(frozen=True)
class Server(Record):
    id: str
    label: str
    baseline: bool
    params: ServerParams
    host: str
    port: int
    gpus: tuple[int, ...]
    wave: int
    argv: tuple[str, ...]
    env: dict[str, str]
    log: str
    readiness: Readiness
    cache_flush: CacheFlush
    #: None: the server does not speculate (no acceptance length to read).
    acceptance: Acceptance | None
    secrets: tuple[str, ...] = ()
    #: Nodes the server spans (Slurm; `gpus` are each node's); written only when > 1.
    nodes: int = 1
    #: Spanning nodes: the head's port every rank meets at (torch.distributed's rendezvous),
    #: planned apart from every server port; written only when nodes > 1.
    rendezvous_port: int | None = None
    #: Spanning nodes: what ranks other than 0 add to `argv` (vLLM's `--headless`: only
    #: rank 0 serves HTTP); written only when there are some.
    follower_args: tuple[str, ...] = ()
    #: The API key the server is launched with, as its command holds it (a `${NAME}`
    #: reference, resolved at launch): clients send it as `Authorization: Bearer`. Read from
    #: the command by the adapter at compile time; written only when there is one.
    api_key: str | None = None
    #: Where a server that runs in real time says how far it fell behind its schedule
    #: (the simulator's); written only when there is one.
    schedule_lag: ScheduleLag | None = None
    #: Where a simulated server's time dilation is set per point (the simulator's);
    #: written only when there is one.
    time_dilation: TimeDilation | None = None

    #: Fields left out of plan.json at their default (plans written before them read the same).
    OMITTED_AT_DEFAULT = ("nodes", "rendezvous_port", "follower_args", "api_key",
                          "schedule_lag", "time_dilation")


@dataclass(frozen=True, slots=True)
class Benchmark(Record):
    id: str
    server: str
    baseline: str | None
    params: BenchParams
    argv: tuple[str, ...] | None = None
    #: The point runs this many times slower than modelled, its times divided back (the
    #: server's `time_dilation` says where to set it); written only when not 1.
    time_dilation: float = 1.0

    OMITTED_AT_DEFAULT = ("time_dilation",)


@dataclass(frozen=True)
class Dropped(Record):
    """Sweep points the compiler left out: `point` is the swept values (config path -> its
    JSON value) they share, `code` and `reason` why."""
    point: dict[str, typing.Any]
    code: str
    reason: str
    points: int = 1


@dataclass(frozen=True)
class Estimates(Record):
    """The compiler's time estimates: each server's (start and its points), and the whole
    run's wall time (waves in parallel), with what they came from."""
    servers_s: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    note: str = ""

    OMITTED_AT_DEFAULT = ("servers_s", "wall_s", "note")


# -- where the plan runs ------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmJob(Record):
    """One sbatch job: its servers (one, or a packed wave) and how Slurm sizes it."""
    name: str
    servers: tuple[str, ...]
    nodes: int
    gpus: int
    gpus_per_node: int
    #: sbatch --time as written in the script, and in seconds.
    time_limit: str
    time_limit_s: int
    #: What the limit must cover: the readiness deadline + the points' estimated time.
    need_s: float
    deadline_s: float
    points_s: float
    #: The batch script, relative to the run dir.
    script: str

    def _check(self):
        out = [] if self.servers else ["servers: at least one"]
        if self.nodes < 1:
            out.append("nodes must be >= 1")
        return out


#: Where specc before the plan's `cluster` record kept a Slurm plan's jobs (relative to the
#: run dir): compile deletes it, and run refuses a plan beside one that lacks `cluster`.
OLD_JOBS_FILE = Path("slurm") / "cluster.json"


@dataclass(frozen=True)
class Cluster(Record):
    """A `cluster=slurm` plan's settings and jobs (a plan without one runs on this machine)."""
    name: str
    gpus_per_node: int
    nodes_per_server: int
    partition: str | None = None
    account: str | None = None
    #: cluster.time_limit as configured (None: each job's limit is computed).
    time_limit: str | None = None
    pack: bool = False
    sbatch_args: tuple[str, ...] = ()
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    #: A job pending longer is cancelled (None: wait as long as Slurm keeps it).
    pending_timeout_s: float | None = None
    poll_interval_s: float = 1.0
    jobs: tuple[SlurmJob, ...] = ()

    def _check(self):
        out = [] if self.name == "slurm" else [f"name {self.name!r}: only 'slurm' is submitted to"]
        names = Counter(j.name for j in self.jobs)   # one state file and script per name
        out += [f"job {n!r} appears {k} times" for n, k in names.items() if k > 1]
        return out

    def job(self, name: str) -> SlurmJob:
        return next(j for j in self.jobs if j.name == name)


# -- how the servers are explored ------------------------------------------------------------
@dataclass(frozen=True)
class Candidate(Record):
    """One speculative setting `search=tune` may start: its server and its draft shape."""
    server: str
    num_steps: int
    topk: int
    num_draft_tokens: int


@dataclass(frozen=True)
class Search(Record):
    """`search=tune`: the candidates and the rules that decide which of them start
    (docs/tune.md). A plan without one runs every server (`search=grid`)."""
    name: str
    baseline: str
    candidates: tuple[Candidate, ...]
    #: The ladder of client concurrencies every started server is measured at.
    concurrencies: tuple[int, ...]
    #: Started right after the baseline: its acceptance predicts every other candidate.
    probe: str
    #: Starts the search may take, the baseline included (the grid takes len(candidates)+1).
    max_starts: int
    #: The least relative error a prediction is assumed to have when racing.
    margin: float
    #: Paired intervals' confidence level (ties and separation).
    level: float = 0.95
    #: Acceptance assumed before anything is measured (what chose the probe).
    prior_acceptance: float = 0.7
    #: The GPU kind whose calibration gives the predictions' step costs (hardware.gpu).
    gpu: str | None = None
    #: Mean KV tokens per sequence while decoding (input_len + output_len / 2).
    context: float | None = None
    #: The draft model's facts (specc.facts.ModelFacts.values: fact key -> its value), as the
    #: tuner reads them.
    draft_facts: dict[str, typing.Any] | None = None
    #: Latency SLO, e.g. {"p99_ttft_ms": 200}: the capacity at it is reported.
    slo: dict[str, float] = field(default_factory=dict)
    #: The SLO bracket stops when the first load not meeting is within this of the
    #: capacity (relative; specc.tune.bracket).
    precision: float = 0.1
    #: One more start, of the deployed schedule, measured at every concurrency (docs/tune.md).
    verify: bool = True
    #: One more start, of the engine's own default adaptive mode, as a reference row.
    vs_engine_default: bool = False
    #: "auto" (static where within margin, else a schedule), "schedule" or "static".
    deploy: str = "auto"
    #: How the engine release takes a batch-size schedule, as data from its adapter
    #: (specc.engines.*.schedule_format): the launch command's template and the file or
    #: list the bands go into; None: it takes none (a static setting is deployed).
    schedule_format: dict | None = None

    def _check(self):
        out = [] if self.name == "tune" else [f"name {self.name!r}: only 'tune' is a search"]
        ids = [c.server for c in self.candidates]
        if len(ids) < 2:
            out.append("candidates: at least two")
        if self.probe not in ids:
            out.append(f"probe {self.probe!r} is not a candidate")
        if self.max_starts < 2:
            out.append("max_starts must be >= 2 (the baseline and the probe)")
        if not 0.01 <= self.precision <= 0.5:
            out.append(f"precision {self.precision} is outside [0.01, 0.5]")
        return out


@dataclass(frozen=True)
class Plan(Record):
    experiment: str
    engine: str
    servers: tuple[Server, ...]
    benchmarks: tuple[Benchmark, ...]
    diagnostics: tuple[Diagnostic, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    engine_info: EngineInfo = field(kw_only=True)   # required; kw_only keeps plan.json's order
    #: The model facts the plan states: "target", and "draft" (None without one).
    facts: dict[str, ModelFacts | None] = field(default_factory=dict)
    estimates: Estimates = field(default_factory=lambda: Estimates())
    fail_fast: bool = False
    #: The Slurm jobs (cluster=slurm); None, and left out of plan.json: runs on this machine.
    cluster: Cluster | None = None
    #: `search=tune` (docs/tune.md); None, and left out of plan.json: every server runs.
    search: Search | None = None
    version: int = PLAN_VERSION

    OMITTED_AT_DEFAULT = ("cluster", "search")

    def _check(self):
        ids = {s.id for s in self.servers}
        bench_ids = {b.id for b in self.benchmarks}
        out = _outside_run_dir(self) + _repeated_ids(self, ids, bench_ids)
        out += [f"benchmark {b.id}: no server {b.server!r}" for b in self.benchmarks
                if b.server not in ids]
        out += [f"benchmark {b.id}: no baseline point {b.baseline!r}" for b in self.benchmarks
                if b.baseline is not None and b.baseline not in bench_ids]
        if self.cluster is not None:   # each server runs in exactly one job
            placed = Counter(sid for j in self.cluster.jobs for sid in j.servers)
            out += [f"cluster job {j.name}: no server {sid!r}" for j in self.cluster.jobs
                    for sid in j.servers if sid not in ids]
            out += [f"cluster: server {sid} is in {n} jobs" for sid, n in placed.items()
                    if n > 1 and sid in ids]
            out += [f"cluster: server {s.id} is in no job" for s in self.servers
                    if s.id not in placed]
        if self.search is not None:
            out += [f"search: no server {sid!r}" for sid in
                    [self.search.baseline] + [c.server for c in self.search.candidates]
                    if sid not in ids]
        return out

    # -- lookups ---------------------------------------------------------------
    def server(self, server_id: str) -> Server:
        found = self._servers_by_id.get(server_id)
        if found is None:
            raise StopIteration(server_id)
        return found

    @functools.cached_property
    def _servers_by_id(self) -> dict[str, Server]:
        return {s.id: s for s in self.servers}

    def point_label(self, bench: Benchmark) -> str:
        """The point's name as specc prints it (`EAGLE3 s3 k1 d4 @ c=2`): point_label."""
        server = self._servers_by_id.get(bench.server)
        return point_label(server.label if server is not None else "", bench.server,
                           bench.params.concurrency)

    def benchmarks_of(self, server_id: str) -> list[Benchmark]:
        """The server's points, in plan order (indexed once: a 12,000-job Slurm plan asks
        for every server's points, and a scan each would be quadratic)."""
        return list(self._points_by_server.get(server_id, ()))

    @functools.cached_property
    def _points_by_server(self) -> dict[str, list[Benchmark]]:
        out: dict[str, list[Benchmark]] = {}
        # a run of one server's points at a time (a compiled plan holds one per server)
        for server, run in itertools.groupby(self.benchmarks, operator.attrgetter("server")):
            out.setdefault(server, []).extend(run)
        return out

    @property
    def waves(self) -> list[list[Server]]:
        out: dict[int, list[Server]] = {}
        for s in self.servers:
            out.setdefault(s.wave, []).append(s)
        return [out[k] for k in sorted(out)]

    @property
    def errors(self) -> list:
        return [d for d in self.diagnostics if d.severity == "error"]

    # -- (de)serialisation -------------------------------------------------------
    def to_json(self) -> dict:
        d = super().to_json()
        return {"version": d.pop("version"), **d}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, d, path: str = "") -> Plan:
        if not isinstance(d, dict):
            raise PlanError(f"expected a JSON object, got {_kind(d)}")
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {d.get('version')!r} is not {PLAN_VERSION}: it was "
                            "written by another specc; compile the experiment again")
        plan = _load(cls, d, path or "plan")
        launcher = plan.engine_info.launcher   # as read: a Slurm node wraps commands in srun
        foreign = [f"server {s.id}: its command does not start with {plan.engine}'s own "
                   f"launcher `{' '.join(launcher)}`" for s in plan.servers
                   if not launches_with(s.argv, launcher)]
        if foreign:
            raise PlanError(f"{path or 'plan'}: " + "; ".join(foreign))
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan.json; PlanError (a ValueError) says what is wrong and where in it."""
        return cls.load_checked(path)[0]

    @classmethod
    def load_checked(cls, path: str | Path) -> tuple[Plan, str | None, bool]:
        """(the plan, the digest plan.json records, whether the file still matches it)."""
        from specc.files import PLAN_BYTES, UnreadableFile, read_bounded

        try:
            raw = read_bounded(path, PLAN_BYTES)
        except UnreadableFile as e:
            raise PlanError(str(e)) from None
        return cls.from_bytes(raw)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "plan.json") -> tuple[Plan, str | None, bool]:
        """plan.json's bytes, as read (bounded) by the caller: (the plan, the digest it
        records, whether its bytes still match it); PlanError for anything else."""
        from specc.files import UnreadableFile, parse_json

        try:
            data = parse_json(raw, where)
        except UnreadableFile as e:
            raise PlanError(str(e)) from None
        recorded, unedited = digest_check(raw)
        if isinstance(data, dict):
            said = data.pop("digest", None)   # rewritten by another tool: still its record
            data.pop("seal", None)   # checked by specc.seal, not a field of Plan
            recorded = recorded or (said if isinstance(said, str) else None)
        return cls.from_json(data), recorded, unedited
