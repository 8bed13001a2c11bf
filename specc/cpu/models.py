"""`specc tiny-models`: the tiny target + EAGLE-3 draft (tiny_models.py) written once into
the user's cache, keyed by a hash of the script and the prompt set it trains its tokenizer
on, by the CPU engine venv's Python (it has torch, safetensors, tokenizers, transformers)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from specc.cpu import engine_venv

SCRIPT = Path(__file__).with_name("tiny_models.py")
PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"
STAMP = "tiny-models.json"


class BuildFailed(RuntimeError):
    """The script failed; the message holds its last lines."""


def recipe_hash() -> str:
    h = hashlib.sha256(SCRIPT.read_bytes())
    h.update(PROMPTS.read_bytes())
    return h.hexdigest()[:12]


def default_dir() -> Path:
    return engine_venv.cache_root() / "tiny-models" / recipe_hash()


def read_stamp(out: Path) -> dict | None:
    """What the last build wrote, if it was this recipe's."""
    try:
        info = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("recipe") == recipe_hash() else None


def ensure(python: Path, out: Path | None = None, check: bool = False) -> dict:
    """Build the pair into `out` (default: the cache) unless this recipe's pair is there."""
    out = Path(out) if out else default_dir()
    info = read_stamp(out)
    if info:
        return {**info, "built": False, **(_run(python, out, "--no-build", "--check")
                                           if check else {})}
    out.mkdir(parents=True, exist_ok=True)
    info = _run(python, out, *(["--check"] if check else []))
    info["recipe"] = recipe_hash()
    (out / STAMP).write_text(json.dumps({k: v for k, v in info.items() if k != "check"},
                                        indent=2) + "\n")
    return {**info, "built": True}


def _run(python: Path, out: Path, *flags: str) -> dict:
    proc = subprocess.run([str(python), str(SCRIPT), "--out", str(out), "--prompts",
                           str(PROMPTS), *flags], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise BuildFailed((proc.stdout + proc.stderr).strip()[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])
