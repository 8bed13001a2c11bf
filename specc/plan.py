"""The Plan: one immutable value, compiled once, reviewed, then executed as written."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

PLAN_VERSION = 1


@dataclass(frozen=True)
class Server:
    id: str
    label: str
    baseline: bool
    params: dict
    host: str
    port: int
    gpus: tuple[int, ...]
    wave: int
    argv: tuple[str, ...]
    env: dict
    log: str
    readiness: dict
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Benchmark:
    id: str
    server: str
    baseline: str | None
    params: dict
    argv: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Dropped:
    point: dict
    code: str
    reason: str
    points: int = 1


@dataclass(frozen=True)
class Plan:
    experiment: str
    engine: str
    servers: tuple[Server, ...]
    benchmarks: tuple[Benchmark, ...]
    diagnostics: tuple = ()
    dropped: tuple[Dropped, ...] = ()
    engine_info: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    estimates: dict = field(default_factory=dict)
    fail_fast: bool = False
    version: int = PLAN_VERSION

    # -- lookups ---------------------------------------------------------------
    def server(self, server_id: str) -> Server:
        return next(s for s in self.servers if s.id == server_id)

    def benchmarks_of(self, server_id: str) -> list[Benchmark]:
        return [b for b in self.benchmarks if b.server == server_id]

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
        d = asdict(self)
        order = ["version", "experiment", "engine", "servers", "benchmarks", "diagnostics",
                 "dropped", "engine_info", "facts", "estimates", "fail_fast"]
        return {k: _plain(d[k]) for k in order}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        if d.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {d.get('version')!r} is not {PLAN_VERSION}")
        servers = tuple(Server(**{**s, "gpus": tuple(s["gpus"]), "argv": tuple(s["argv"]),
                                  "secrets": tuple(s.get("secrets", ()))}) for s in d["servers"])
        benches = tuple(Benchmark(**{**b, "argv": tuple(b["argv"]) if b.get("argv") else None})
                        for b in d["benchmarks"])
        return cls(experiment=d["experiment"], engine=d["engine"], servers=servers,
                   benchmarks=benches, diagnostics=tuple(d.get("diagnostics", ())),
                   dropped=tuple(Dropped(**x) for x in d.get("dropped", ())),
                   engine_info=d.get("engine_info", {}), facts=d.get("facts", {}),
                   estimates=d.get("estimates", {}), fail_fast=d.get("fail_fast", False))

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        return cls.from_json(json.loads(Path(path).read_text()))


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x
