"""The benchmark matrix: sweep axes -> distinct server configurations x client points.

The matrix is the Cartesian product of the sweep axes; a list of mappings is one
zipped axis. Axes under `benchmark.` are client-level (no restart); all others
are server-level, so each distinct server configuration appears once. Server
configurations the engine would rewrite or that cannot exist are dropped with
their reason (when speculation is swept); with `baseline: true` every
speculative configuration gets its non-speculative twin.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from specc import facts as facts_mod
from specc.compile import rules
from specc.compile.columns import ABSENT, Column, Same, object_texts
from specc.compile.spec import ServerSpec
from specc.config import schema
from specc.diagnostics import Diagnostic, error, has_errors, unique, warning
from specc.engines import get_engine
from specc.engines.base import Engine
from specc.plan import Dropped

SERVER_SECTIONS = ("model_pair", "hardware", "engine", "server", "speculation", "readiness")
CLIENT_SECTION = "benchmark"
SPEC_KEYS = ("algorithm", "num_steps", "topk", "num_draft_tokens")


#: json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str), built once (10^5
#: client points each hashed for their ids: the per-call encoder was a fifth of the compile).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


_QUOTE = json.encoder.encode_basestring_ascii   # what _CANONICAL does to a str


def canonical(obj) -> str:
    """The one JSON spelling of a value: what ids and server keys hash."""
    return _CANONICAL(obj)


def short_hash(obj, n: int = 6) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class ServerConfig:
    """One distinct server configuration of the matrix."""

    key: str            # canonical server sections (readiness excluded): what its id hashes
    sections: dict
    spec: ServerSpec
    axes: dict          # the swept values that name it, e.g. {"speculation.topk": 4}
    baseline_key: str   # key of its matched non-speculative twin (its own key for a baseline)


@dataclass(frozen=True)
class Matrix:
    servers: tuple[ServerConfig, ...]    # baselines first
    client_points: ClientPoints       # resolved `benchmark` sections, one per client point
    dropped: tuple[Dropped, ...]


def _get(tree: dict, path: str):
    node = tree
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def _set(tree: dict, path: str, value) -> None:
    """Set a dotted path; a dict value at a section merges into it (a zipped axis).

    Copy on write: each mapping on the path is copied, the rest of the tree stays shared
    with the config (one deep copy per server configuration cost seconds at 10^4 servers)."""
    parts = path.split(".")
    node = tree
    for p in parts[:-1]:
        node[p] = dict(node[p])
        node = node[p]
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
        node[parts[-1]] = {**node[parts[-1]], **value}
    else:
        node[parts[-1]] = value


def _axis_label(path: str, value) -> dict:
    if isinstance(value, dict):
        return {f"{path}.{k}": v for k, v in value.items()}
    return {path: value}


def check_axes(cfg: dict) -> list[Diagnostic]:
    """Every sweep axis names a sweepable key and every value fits its schema."""
    out = []
    for path, values in (cfg.get("sweep") or {}).items():
        where = f"sweep.{path}"
        top = path.split(".")[0]
        if top == "readiness":
            out.append(error("SWEEP_AXIS", where, "readiness settings cannot be swept: they do "
                             "not change what a point measures",
                             f"set {path} once, outside the sweep"))
            continue
        if top not in SERVER_SECTIONS + (CLIENT_SECTION,):
            out.append(error("SWEEP_AXIS", where, f"'{path}' cannot be swept",
                             "sweep keys under model_pair, hardware, engine, server, "
                             "speculation or benchmark"))
            continue
        if len(set(map(canonical, values))) != len(values):
            out.append(error("SWEEP_AXIS", where, "repeated values", "list each value once"))
        for i, value in enumerate(values):
            if isinstance(value, dict):
                node = copy.deepcopy(_get(cfg, path))
                if not isinstance(node, dict):
                    out.append(error("SWEEP_AXIS", f"{where}[{i}]",
                                     "a mapping value needs a config section here",
                                     "give scalar values"))
                    continue
                node.update(value)
                reason = schema.validate_value(path, node)
            else:
                reason = schema.validate_value(path, value)
            if reason:
                out.append(error("SWEEP_AXIS", f"{where}[{i}]", f"{value!r}: {reason}",
                                 "fix the value or the axis path"))
    return out


def spec_for(sections: dict, cluster: str = "local") -> ServerSpec:
    if len(sections.get("server") or ()) != len(schema.SERVER_KNOBS):   # every knob, once
        sections = {**sections, "server": schema.server_section(sections)}
    mp = sections["model_pair"]
    eng = sections["engine"]
    context = get_engine(eng["name"], eng.get("version")).derived_context_length
    target = facts_mod.resolve(mp["target"], "model_pair.target", context)
    draft = facts_mod.resolve(mp["draft"], "model_pair.draft", context) if mp.get("draft") else None
    return ServerSpec(target=target, draft=draft, cluster=cluster, **sections)


def baseline_of(sections: dict) -> dict:
    """The matched non-speculative server: same target, hardware and engine; no draft."""
    twin = dict(sections)   # shares what it does not change, like _set
    twin["speculation"] = {k: None for k in SPEC_KEYS}
    # no draft, so that the baselines of different drafts are one server
    twin["model_pair"] = {**sections["model_pair"], "draft": None}
    return twin


def server_key(sections: dict) -> str:
    return canonical({k: _without_facts_for(sections[k]) if k == "model_pair" else sections[k]
                      for k in SERVER_SECTIONS if k != "readiness"})


def _without_facts_for(pair):
    """The model pair less each model's `facts_for` (which model its facts describe): it
    changes nothing a server runs, and server ids stay what they were before it existed
    (run dirs resume, compare matches)."""
    if not isinstance(pair, dict):
        return pair
    return {k: {f: v for f, v in m.items() if f != "facts_for"}
            if k in ("target", "draft") and isinstance(m, dict) else m for k, m in pair.items()}


def _num_prompts(bench: dict) -> int:
    """Explicit, else a trace's requests, else enough for the stated precision: at least
    ``min_requests`` requests and ``min_output_tokens`` tokens, and one full wave at the
    point's concurrency."""
    if bench.get("num_prompts"):
        return bench["num_prompts"]
    if bench.get("dataset") == "trace" and bench.get("dataset_path"):
        from specc.prompts import trace   # a trace is replayed whole

        return trace.count(bench["dataset_path"]) or bench["min_requests"]
    by_tokens = -(-bench["min_output_tokens"] // bench["output_len"])
    return max(bench["min_requests"], by_tokens, bench["concurrency"])


#: Workload keys (docs/workloads.md) a point's params leave out at these values, so a plan
#: that uses none of them keeps the benchmark ids and plan.json it had before they existed
#: (its run dirs resume); readers take the value here when the key is absent.
NEUTRAL_WORKLOAD = {"burstiness": None, "ramp_s": None, "multi_turn": False, "shared_prefix_len": 0,
                    "shared_prefix_groups": 1}


#: ClientPoints.distinct keeps its answers up to this many points (10^5 would stay in memory).
KEEP_DISTINCT = 4096


class ClientPoints(Sequence):
    """A sweep's client points, each a resolved `benchmark` section (a dict), in product order
    and held as columns: the section's own values once, each swept key's values one per
    point. 10^5 points on one server were 10^5 dicts, most of the compile's time and memory;
    the rules, the ids and the params records read the columns (each distinct combination
    of what they read, once), and a point's dict is built only when asked for."""

    def __init__(self, keys: tuple[str, ...], columns: dict[str, Column], count: int):
        self.keys = keys            # in the order a point's dict holds them
        self.columns = columns      # Same(value), or one value per point (ABSENT: left out)
        self._count = count
        self._firsts: dict[tuple, list[int]] = {}
        self._distinct: dict[tuple, list[dict]] = {}
        self._largest: dict[str, int | None] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> dict:  # type: ignore[override]  # by index only, no slices
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        out = {}
        for k in self.keys:
            col = self.columns[k]
            v = col.value if type(col) is Same else col[i]
            if v is not ABSENT:
                out[k] = v
        return out

    def values(self, key: str) -> list:
        """`key`'s value at every point (None where a point leaves it out, as dict.get)."""
        col = self.columns.get(key, Same(None))
        if type(col) is Same:
            return [None if col.value is ABSENT else col.value] * self._count
        return [None if v is ABSENT else v for v in col] if ABSENT in col else list(col)

    def rows(self, keys) -> Iterator[tuple]:
        """(the points' values of `keys`) per point, as dict.get reads them."""
        return zip(*(self.values(k) for k in keys))

    def firsts(self, keys) -> list[int]:
        """The first point of each distinct combination of `keys`' values, in order: a rule
        that reads only those keys says the same of every point that shares them."""
        varying = tuple(k for k in keys if type(self.columns.get(k, _SHARED)) is not Same)
        got = self._firsts.get(varying)   # rules that read the same swept keys share it
        if got is None:
            got = self._firsts[varying] = sorted(
                _firsts(_combos([self.columns[k] for k in varying], self._count)).values())
        return got

    def distinct(self, keys, also=()) -> list[dict]:
        """The first point of each distinct combination of `keys`' values (see firsts), each
        a dict of those keys' values alone (what the point leaves out, left out): a rule
        reads no other (POINT_RULE_READS, CLIENT_RULE_READS). Two swept axes of 1000 and 100
        values are 10^5 distinct points: whole dicts of them were most of such a compile's
        time and memory, and reading them through the columns one key at a time most of the rest.
        `also`: keys the dicts hold too, the first point's values (not told apart by them).
        A few of them are kept: each of 12,000 servers asks again (the rules never change
        what they are handed)."""
        got = self._distinct.get((tuple(keys), tuple(also)))
        if got is not None:
            return got
        at = self.firsts(keys)
        names: list[str] = []
        columns: list[Iterable] = []
        gaps = []   # keys some of these points leave out
        for k in dict.fromkeys((*keys, *also)):
            col = self.columns.get(k)
            if col is None or type(col) is Same and col.value is ABSENT:
                continue
            names.append(k)
            if type(col) is Same:
                columns.append(itertools.repeat(col.value))
                continue
            values = col if len(at) == self._count else list(map(col.__getitem__, at))
            columns.append(values)
            if ABSENT in values:
                gaps.append(k)
        rows = itertools.islice(zip(*columns), len(at)) if columns else [()] * len(at)
        out = list(map(dict, map(zip, itertools.repeat(names), rows)))   # in C, not per point
        for k in gaps:
            for point in out:
                if point[k] is ABSENT:
                    del point[k]
        if len(out) <= KEEP_DISTINCT:
            self._distinct[tuple(keys), tuple(also)] = out
        return out

    def largest(self, keys) -> dict | None:
        """Each of `keys` at its largest value over the points (not always one point's: the
        largest concurrency and the longest input may be at different points), or None
        unless every point holds a whole number >= 0 for each. A rule whose findings only
        grow with what it reads (rules.GROWING) that finds nothing there finds nothing at
        any point. Kept per key: each of 12,000 servers asks again."""
        out = {}
        for k in keys:
            if k not in self._largest:
                col = self.columns.get(k)
                values = None if col is None else [col.value] if type(col) is Same else col
                self._largest[k] = max(values) if values and set(map(type, values)) == {int} \
                    and min(values) >= 0 else None   # bool is not int here: type() is exact
            out[k] = self._largest[k]
            if out[k] is None:
                return None
        return out

    def canonical_texts(self, quoted: bool = False, around: tuple[str, str] = ("", "")
                        ) -> Iterator[str]:
        """Each point's `canonical(point)`, written a column at a time; `quoted`: as the body
        of a JSON string, i.e. `canonical(canonical(point))[1:-1]` (what its ids hash);
        `around`: text before and after each."""
        return object_texts([(k, self.columns[k]) for k in sorted(self.keys)], self._count,
                            encode=_CANONICAL, encode_str=_QUOTE, around=around,
                            escape=(lambda text: _QUOTE(text)[1:-1]) if quoted else None)


def _tiled(values: list, inner: int, outer: int) -> list:
    """An axis's values at each point of the product: each repeated for the points of the
    axes after it, the whole repeated for the points of the axes before it."""
    return list(itertools.chain.from_iterable(map(itertools.repeat, values,
                                                  itertools.repeat(inner)))) * outer


_SHARED = Same(None)   # a key no point holds: the same (absent) at every point
_KEEP = object()   # a zipped axis value that does not set the key: the point keeps its own


def _client_points(cfg: dict, client_axes) -> ClientPoints:
    base = cfg[CLIENT_SECTION]
    sizes = [len(v) for _, v in client_axes]
    count = math.prod(sizes)
    keys = list(base)
    columns: dict[str, Column] = {k: Same(v) for k, v in base.items()}
    for j, (path, values) in enumerate(client_axes):
        inner, outer = math.prod(sizes[j + 1:]), math.prod(sizes[:j])
        if path == CLIENT_SECTION:   # zipped: each value sets some keys of the section
            per_key = {k: [v.get(k, _KEEP) for v in values]
                       for k in dict.fromkeys(k for v in values for k in v)}
        else:
            per_key = {path.split(".", 1)[1]: list(values)}
        for k, vals in per_key.items():
            if k not in columns:
                keys.append(k)
            col = _tiled(vals, inner, outer)
            if _KEEP in vals:
                before = columns.get(k, Same(ABSENT))
                before = [before.value] * count if type(before) is Same else before
                col = [b if v is _KEEP else v for v, b in zip(col, before)]
            columns[k] = col
    if "num_prompts" not in columns:
        keys.append("num_prompts")
    columns["num_prompts"] = _derived(columns, count, _NUM_PROMPTS_READS, _num_prompts)
    for key, neutral in NEUTRAL_WORKLOAD.items():
        got = columns.get(key)
        if got is None:
            continue
        if type(got) is not Same:
            marked = [ABSENT if v == neutral else v for v in got]
            got = marked if marked.count(ABSENT) < len(marked) else Same(neutral)
            columns[key] = got
        if type(got) is Same and got.value == neutral:
            del columns[key]
            keys.remove(key)
    return ClientPoints(tuple(keys), columns, count)


#: What _num_prompts reads of a point.
_NUM_PROMPTS_READS = ("num_prompts", "dataset", "dataset_path", "min_output_tokens", "output_len",
                      "min_requests", "concurrency")


def _combos(columns: list, count: int) -> list:
    """Per point, one key of its values in `columns`: equal keys, equal values of the same
    types (1 and 1.0 are equal in Python, not in a plan)."""
    if not columns:
        return [()] * count
    columns = columns + [list(map(type, c)) for c in columns if len(set(map(type, c))) > 1]
    return list(zip(*columns))


def _firsts(combos: list) -> dict:
    """Each distinct key -> the first point that has it (stored backwards: the last store of
    a key going backwards is its first point); a list value (categories) by its text."""
    try:
        return dict(zip(reversed(combos), range(len(combos) - 1, -1, -1)))
    except TypeError:
        return dict(zip(map(repr, reversed(combos)), range(len(combos) - 1, -1, -1)))


def _derived(columns: dict[str, Column], count: int, reads, compute) -> Column:
    """A value computed from each point's `reads`, once per distinct combination of them."""
    cols = {k: columns.get(k, Same(ABSENT)) for k in reads}

    def point(i: int) -> dict:
        out = {}
        for k, col in cols.items():
            v = col.value if type(col) is Same else col[i]
            out[k] = None if v is ABSENT else v
        return out

    varying = [col for col in cols.values() if type(col) is not Same]
    if not varying:
        return Same(compute(point(0)))
    combos = _combos(varying, count)
    firsts = _firsts(combos)
    table = {combo: compute(point(i)) for combo, i in firsts.items()}
    keys: Iterable = map(repr, combos) if type(next(iter(table))) is str else combos   # str: told apart by their text
    return list(map(table.__getitem__, keys))


def _same_server(engine: Engine, spec: ServerSpec, key: str, launched: dict, servers: dict):
    """The earlier, differently configured server the engine would run identically (same
    command and environment), else None; records this one's command."""
    env, _ = engine.env(spec, [])
    ident = canonical([engine.argv(spec, host="", port=0, rendezvous_port=0), env])
    first = launched.setdefault(ident, key)
    if first != key and first in servers:
        return servers[first]
    return None


def _axes_text(axes: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in axes.items()) or "the base config"


def expand(cfg: dict, engine: Engine) -> tuple[Matrix | None, list[Diagnostic]]:
    """Config (schema-valid) -> (the matrix or None, diagnostics of its axes and servers)."""
    diags: list[Diagnostic] = check_axes(cfg)
    if has_errors(diags):
        return None, diags

    axes = list((cfg.get("sweep") or {}).items())
    server_axes = [(p, v) for p, v in axes if not p.startswith(CLIENT_SECTION)]
    client_axes = [(p, v) for p, v in axes if p.startswith(CLIENT_SECTION)]
    n_server = math.prod(len(v) for _, v in server_axes)
    n_client = math.prod(len(v) for _, v in client_axes)
    worst = n_server * n_client * (2 if cfg.get("baseline") else 1)
    if n_server * n_client > cfg["max_points"]:
        return None, diags + [error(
            "MATRIX_TOO_LARGE", "sweep",
            f"the sweep has {n_server * n_client} points (up to {worst} with baselines), "
            f"over max_points={cfg['max_points']}",
            f"narrow the sweep, or raise the cap knowingly: max_points={n_server * n_client * 2}")]

    base = {k: schema.server_section(cfg) if k == "server" else cfg[k] for k in SERVER_SECTIONS}
    cluster = (cfg.get("cluster") or {}).get("name", "local")
    sweeps_spec = any(p.split(".")[0] == "speculation" for p, _ in server_axes)

    # distinct server configurations (speculative ones, then their baseline twins)
    servers: dict[str, ServerConfig] = {}
    dropped: list[Dropped] = []
    launched: dict[str, str] = {}   # what the engine would run -> the first key that runs it
    for combo in itertools.product(*(v for _, v in server_axes)):
        sections = dict(base)
        axis_values: dict = {}
        for (path, _), value in zip(server_axes, combo):
            _set(sections, path, value)
            axis_values.update(_axis_label(path, value))
        spec = spec_for(sections, cluster)
        found = rules.check_server(spec, engine)
        errors = [d for d in found if d.severity == "error"]
        if errors and sweeps_spec and all(d.code in rules.DROPPABLE for d in errors):
            dropped.append(Dropped(point=axis_values, code=errors[0].code,
                                   reason=errors[0].message, points=n_client))
            continue
        diags += found
        twin = baseline_of(sections)
        twin_key = server_key(twin)   # also the twin's own baseline key: baseline_of is idempotent
        twins = []
        if cfg.get("baseline") and spec.speculative and twin_key not in servers:
            b_axes = {k: v for k, v in axis_values.items()
                      if not k.startswith(("speculation.", "model_pair.draft"))}
            twins.append((twin, spec_for(twin, cluster), b_axes, twin_key))
        twins.append((sections, spec, axis_values, server_key(sections)))
        for secs, sp, ax, key in twins:
            same = _same_server(engine, sp, key, launched, servers)
            if same is not None:   # an engine without trees: topk does not change its server
                dropped.append(Dropped(
                    point=ax, code="ENGINE_SAME_SERVER", points=n_client,
                    reason=f"{engine.name} runs the same server as "
                           f"{_axes_text(same.axes)} (the settings differ only in what "
                           f"{engine.name} ignores); measured once, there"))
                continue
            if key not in servers:
                servers[key] = ServerConfig(key=key, sections=secs, spec=sp, axes=ax,
                                            baseline_key=twin_key)
                if sp is not spec:
                    diags += rules.check_server(sp, engine)
    merged = [d for d in dropped if d.code == "ENGINE_SAME_SERVER"]
    if merged:
        diags.append(warning(
            "ENGINE_SAME_SERVER", "sweep",
            f"{len(merged)} server configuration(s) launch the same {engine.name} server as "
            "another one; each server is measured once (see the dropped points)",
            f"sweep only what {engine.name} distinguishes (see ENGINE_NO_TREE)"))
    if has_errors(diags):
        return None, unique(diags)
    if not servers:
        return None, unique(diags + [error(
            "MATRIX_EMPTY", "sweep", f"all {len(dropped)} server configurations were dropped",
            "see the dropped points and fix the speculation grid")])

    # baselines first: speedups can be computed as soon as a speculative point finishes
    ordered = sorted(servers.values(), key=lambda s: s.spec.speculative)
    return Matrix(servers=tuple(ordered), client_points=_client_points(cfg, client_axes),
                  dropped=tuple(dropped)), diags
