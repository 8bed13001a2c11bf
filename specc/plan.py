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
import types
import typing
from collections import Counter
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path, PurePosixPath

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


#: plan.json's last key: the sha256 of every byte before it (the reviewed plan, as written).
_DIGEST_TAIL = re.compile(rb',\n"digest":"(sha256:[0-9a-f]{64})"\}\n\Z')


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


class PlanError(ValueError):
    """plan.json does not fit the schema; the message names the path and the problem."""


#: Per record type, its float fields (an int given for one is stored as a float).
_FLOAT_FIELDS: dict[type, tuple[str, ...]] = {}


class Record:
    """Base of every plan type: one `to_json` / `from_json`, driven by the annotations."""

    __slots__ = ()
    OMITTED_AT_DEFAULT: tuple = ()
    __dataclass_fields__: typing.ClassVar[dict[str, typing.Any]]   # every subclass is a dataclass

    def to_json(self) -> dict:
        return {f.name: _dump(getattr(self, f.name)) for f in fields(self)
                if not (f.name in self.OMITTED_AT_DEFAULT and getattr(self, f.name) == f.default)}

    @classmethod
    def from_json(cls, data, path: str = ""):
        return _load(cls, data, path or cls.__name__)

    def _check(self) -> list[str]:
        """Problems a well-typed value can still have (a bad regex, a negative budget)."""
        return []

    def __post_init__(self):
        floats = _FLOAT_FIELDS.get(type(self))
        if floats is None:
            floats = _FLOAT_FIELDS[type(self)] = tuple(
                f.name for f in fields(self) if f.type in ("float", "float | None"))
        for name in floats:   # 120 and 120.0 are one value: always written as a float
            value = getattr(self, name)
            if type(value) is int:
                object.__setattr__(self, name, float(value))
        problems = self._check()
        if problems:
            raise ValueError("; ".join(problems))


def build_many(cls, count: int, varying: dict[str, list], shared: dict | None = None) -> list:
    """`count` records of `cls`, each field set from `varying` (a list with one value per
    record) or `shared` (one value for all), else its default: what `cls(**fields)` gives,
    in a fraction of the time (10^5 client points' params records: the frozen constructor
    sets each of 33 fields through object.__setattr__). Only for records whose
    construction checks and converts nothing: Params, and records without float fields
    or checks (Benchmark)."""
    shared = shared or {}
    post = cls.__post_init__
    if not (post is Params.__post_init__ or (
            post is Record.__post_init__ and cls._check is Record._check
            and not any(f.type in ("float", "float | None") for f in fields(cls)))):
        raise TypeError(f"{cls.__name__} is built by its constructor (it checks or converts)")
    names = {f.name: f for f in fields(cls)}
    unknown = sorted((varying.keys() | shared.keys()) - names.keys())
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    columns = []
    column: typing.Iterable
    for name, f in names.items():
        if name in varying:
            column = varying[name]
            if len(column) != count:
                raise ValueError(f"{name}: {len(column)} values for {count} records")
        elif name in shared:
            column = itertools.repeat(shared[name], count)
        elif f.default is not MISSING:
            column = itertools.repeat(f.default, count)
        else:
            raise TypeError(f"{cls.__name__}: no value for {name!r}")
        columns.append(column)
    return list(map(_filler(cls), *columns)) if columns else []


@functools.cache
def _filler(cls):
    """A function (field values, in order) -> a `cls` record. It fills an instance of a
    twin class with the same slots, whose plain attribute stores are the interpreter's
    fastest, then makes the instance a `cls` (same layout: Python allows the switch), so
    the frozen record is never written to after it is one."""
    if not cls.__dict__.get("__slots__"):
        raise TypeError(f"{cls.__name__} has no slots")
    twin = type(f"_Filling{cls.__name__}", cls.__bases__, {"__slots__": cls.__slots__})
    names = [f.name for f in fields(cls)]
    source = (f"def fill({', '.join(names)}):\n    record = new(twin)\n"
              + "".join(f"    record.{n} = {n}\n" for n in names)
              + "    record.__class__ = cls\n    return record\n")
    scope = {"new": object.__new__, "twin": twin, "cls": cls}
    exec(source, scope)   # names are the dataclass's own field names (identifiers)
    return scope["fill"]


def _dump(x):
    if isinstance(x, Record):
        return x.to_json()
    if isinstance(x, (list, tuple)):
        return [_dump(v) for v in x]
    if isinstance(x, dict):
        return {k: _dump(v) for k, v in x.items()}
    return x


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


_HINTS: dict[type, dict] = {}


def _load(tp, value, path: str):
    """Read `value` as type `tp`; raise PlanError naming `path` on the first misfit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, Params):
        return tp.read(value, path)
    if isinstance(tp, type) and issubclass(tp, Record):
        if not isinstance(value, dict):
            raise PlanError(f"{path}: expected an object, got {_kind(value)}")
        hints = _HINTS.get(tp) or _HINTS.setdefault(tp, typing.get_type_hints(tp))
        names = {f.name for f in fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise PlanError(f"{path}: unknown key {unknown[0]!r}")
        kwargs = {}
        for f in fields(tp):
            if f.name in value:
                kwargs[f.name] = _load(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is MISSING and f.default_factory is MISSING:
                raise PlanError(f"{path}.{f.name}: missing")
        try:
            return tp(**kwargs)
        except ValueError as e:
            raise PlanError(f"{path}: {e}") from None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for kind in inner[:-1]:   # str | tuple[str, ...]: the first that fits
            try:
                return _load(kind, value, path)
            except PlanError:
                pass
        return _load(inner[-1], value, path)
    if origin is tuple or tp is tuple:
        if not isinstance(value, list):
            raise PlanError(f"{path}: expected a list, got {_kind(value)}")
        item = args[0] if args else typing.Any
        return tuple(_load(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise PlanError(f"{path}: expected an object, got {_kind(value)}")
        if not args:
            return value
        return {k: _load(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if tp is typing.Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise PlanError(f"{path}: expected true or false, got {_kind(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{path}: expected an integer, got {_kind(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(f"{path}: expected a number, got {_kind(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise PlanError(f"{path}: expected a string, got {_kind(value)}")
        return value
    raise TypeError(f"no schema for {tp!r} at {path}")   # pragma: no cover - a bug here


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


# -- the engine ----------------------------------------------------------------------------
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
    #: Where a running server says its release: {"paths": [...], "field": dotted key}
    #: (None: it does not); the run manifest records the answer (specc/run/provenance.py).
    release_probe: dict | None = None

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

    #: Fields left out of plan.json at their default (plans written before them read the same).
    OMITTED_AT_DEFAULT = ("nodes", "rendezvous_port", "follower_args", "api_key",
                          "schedule_lag")


@dataclass(frozen=True, slots=True)
class Benchmark(Record):
    id: str
    server: str
    baseline: str | None
    params: BenchParams
    argv: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Dropped(Record):
    point: dict
    code: str
    reason: str
    points: int = 1


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
    #: The draft model's facts, as the tuner reads them.
    draft_facts: dict | None = None
    #: Latency SLO, e.g. {"p99_ttft_ms": 200}: the capacity at it is reported.
    slo: dict = field(default_factory=dict)

    def _check(self):
        out = [] if self.name == "tune" else [f"name {self.name!r}: only 'tune' is a search"]
        ids = [c.server for c in self.candidates]
        if len(ids) < 2:
            out.append("candidates: at least two")
        if self.probe not in ids:
            out.append(f"probe {self.probe!r} is not a candidate")
        if self.max_starts < 2:
            out.append("max_starts must be >= 2 (the baseline and the probe)")
        return out


@dataclass(frozen=True)
class Plan(Record):
    experiment: str
    engine: str
    servers: tuple[Server, ...]
    benchmarks: tuple[Benchmark, ...]
    diagnostics: tuple[dict, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    engine_info: EngineInfo = field(kw_only=True)   # required; kw_only keeps plan.json's order
    facts: dict = field(default_factory=dict)
    estimates: dict = field(default_factory=dict)
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
        return next(s for s in self.servers if s.id == server_id)

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
        return [d for d in self.diagnostics if d["severity"] == "error"]

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
                   if s.argv[:len(launcher)] != launcher]
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
        from specc.files import PLAN_BYTES, UnreadableFile, read_bounded, parse_json

        try:
            raw = read_bounded(path, PLAN_BYTES)
            data = parse_json(raw, "plan.json")
        except UnreadableFile as e:
            raise PlanError(str(e)) from None
        recorded, unedited = digest_check(raw)
        if isinstance(data, dict):
            said = data.pop("digest", None)   # rewritten by another tool: still its record
            recorded = recorded or (said if isinstance(said, str) else None)
        return cls.from_json(data), recorded, unedited
