"""The run manifest's record (manifest.json): what produced a run dir, read strictly.

specc/run/provenance.py builds it when a run ends; the report and `specc compare` read
it through `read_manifest`, the one reader: a manifest.json that is not one is a
`ManifestError` naming the file and the field (`manifest.json: manifest.gpu.count:
expected an integer, got str`), exit 2 at the CLI. Fields in docs/run-dir.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specc.files import UnreadableFile, parse_json, read_bounded
from specc.records import PlanError, Record, _load

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
#: A manifest is a few KB per server; this bounds what a hand-made one makes us read.
MANIFEST_BYTES = 64 << 20


class ManifestError(ValueError):
    """manifest.json is not a manifest; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class SpeccInfo(Record):
    version: str | None
    commit: str | None
    dirty: bool | None


@dataclass(frozen=True, slots=True)
class EngineRelease(Record):
    name: str | None
    pinned_release: str | None
    plan_release: str | None
    #: What the running servers said: one release, the list when they disagree, or None.
    reported_release: str | tuple[str, ...] | None
    reported_by_server: dict[str, str]


@dataclass(frozen=True, slots=True)
class GpuInfo(Record):
    name: str
    count: int
    driver: str | None = None
    cuda: str | None = None
    #: How it was found (nvidia-smi, or why not); written only when known.
    source: str | None = None

    OMITTED_AT_DEFAULT = ("source",)


@dataclass(frozen=True, slots=True)
class DatasetHash(Record):
    dataset: str | None
    path: str | None
    sha256: str | None
    #: Why there is no hash (generated prompts, a dataset id); written only then.
    note: str | None = None

    OMITTED_AT_DEFAULT = ("note",)


@dataclass(frozen=True, slots=True)
class Launch(Record):
    server: str | None
    label: str | None
    argv: tuple[str, ...]
    env: dict[str, str]
    secrets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadRange(Record):
    min: float
    median: float
    max: float


@dataclass(frozen=True, slots=True)
class GpuProcess(Record):
    pid: int
    name: str
    memory_mib: float | None = None


@dataclass(frozen=True, slots=True)
class MachineState(Record):
    """The machine while the run measured (specc/run/machine.py samples it)."""
    samples: int
    cpus: int | None
    #: The 1-minute load average over the samples; None where it cannot be read.
    load_avg: LoadRange | None
    #: Fraction of CPU time the hypervisor took (/proc/stat steal); None: not readable.
    cpu_steal: float | None
    #: Compute processes on the GPUs other than the run's servers; None: not readable
    #: (no nvidia-smi: a machine without GPUs).
    gpu_other_processes: tuple[GpuProcess, ...] | None


@dataclass(frozen=True, slots=True)
class Manifest(Record):
    version: int
    experiment: str | None
    specc: SpeccInfo
    engine: EngineRelease
    host: str
    python: str
    python_executable: str
    platform: str
    gpu: GpuInfo
    datasets: tuple[DatasetHash, ...]
    config_sha256: str | None
    plan_sha256: str | None
    plan_digest: str | None
    launch: tuple[Launch, ...]
    #: None (not written) for a run made before specc sampled the machine.
    machine: MachineState | None = None
    #: plan.json's seal when the run ended (specc/seal.py): sealed (by this user's key),
    #: edited, unsealed or foreign (the last three ran with --accept-edited); None (not
    #: written) for a run made before seals.
    plan_seal: str | None = None

    OMITTED_AT_DEFAULT = ("machine", "plan_seal")

    def _check(self):
        return [] if self.version == MANIFEST_VERSION else [
            f"version {self.version} is not {MANIFEST_VERSION} (written by another specc)"]

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"


def read_manifest(run_dir: Path | str) -> Manifest | None:
    """The run dir's manifest; None when it has none; ManifestError when it is not one."""
    path = Path(run_dir) / MANIFEST
    try:
        data = parse_json(read_bounded(path, MANIFEST_BYTES), str(path))
    except FileNotFoundError:
        return None
    except UnreadableFile as e:   # names the file
        raise ManifestError(str(e)) from None
    return parse_manifest(data, str(path))


def parse_manifest(data, where: str, field: str = "manifest") -> Manifest:
    """A parsed manifest (``field`` of file ``where``): ManifestError naming both."""
    try:
        return _load(Manifest, data, field)
    except PlanError as e:
        raise ManifestError(f"{where}: {e}") from None
