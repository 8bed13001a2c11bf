"""Prompt sets by category: specc's own set, MT-Bench, Spec-Bench, SPEED-Bench, a Hugging Face id.

Speculative decoding's gain depends on the text (code and math accept more
draft tokens than open-ended writing), so these sets carry a category and an
id with every prompt, and the results keep both per request.

Kinds (``benchmark.dataset``):

- ``specc``: the set written for specc (``specc/data/prompts.jsonl``: 10
  prompts in each of writing, roleplay, reasoning, math, coding, extraction,
  stem, humanities), or a file of yours in its format: one JSON object per line
  with ``category``, ``prompt`` (or ``turns``, a list of strings) and an
  optional ``id``.
- ``mt_bench``: FastChat's ``question.jsonl`` (``question_id``, ``category``,
  ``turns``; the Hugging Face copy's list-valued ``prompt`` is read too).
- ``spec_bench``: Spec-Bench's ``question.jsonl``: the same schema, its own
  categories (``mt_bench``, ``translation``, ``summarization``, ``qa``,
  ``math_reasoning``, ``rag``).
- ``speed_bench``: NVIDIA SPEED-Bench rows (``question_id``, ``category``,
  ``turns``) as JSON lines, or the prepared form with OpenAI-style
  ``messages``; ``.parquet`` files (the hub's own) need pyarrow (``specc[hf]``).
  Rows still holding SPEED-Bench's placeholder (text that must first be
  fetched with NVIDIA's ``prepare_data.py``) are skipped.
- ``hf``: a Hugging Face dataset id in ``dataset_path`` read with the
  ``datasets`` library (``pip install 'specc[hf]'``), ``hf_subset`` and
  ``hf_split`` choosing the config and split; rows are read as above.

Only a conversation's first turn is sent, unless ``benchmark.multi_turn`` is set: then
every user turn is sent in order, each with the conversation so far (the server's own
answers included; see docs/workloads.md). Every request asks for ``output_len`` tokens: with
EOS ignored, matched points do equal work. Requests go round-robin over the
categories (each category in file order), so any prefix of the sequence covers
the categories as evenly as it can; past the end of the set it starts again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from specc.prompts import DatasetError, Prompt, count_tokens

__all__ = ["KINDS", "SHIPPED", "load", "sequence", "categories_of", "DatasetFormatError",
           "CategoryError", "HubError"]

KINDS = ("specc", "mt_bench", "spec_bench", "speed_bench", "hf")
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"

#: What SPEED-Bench ships in place of text it may not redistribute.
SPEED_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"

_NAMES = {"specc": "specc prompt set", "mt_bench": "MT-Bench question.jsonl",
          "spec_bench": "Spec-Bench question.jsonl", "speed_bench": "SPEED-Bench",
          "hf": "Hugging Face dataset"}


class DatasetFormatError(DatasetError):
    """The file is not the format its kind names."""


class CategoryError(DatasetError):
    """A requested category has no prompts in the set."""


class HubError(DatasetError):
    """The Hugging Face hub (or the ``datasets`` library) is not available."""


# --------------------------------------------------------------------------- rows

def _text(value) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):   # {"role": ..., "content": ...}
        c = value.get("content", value.get("text"))
        return c if isinstance(c, str) else None
    return None


def _user_turns(obj: dict) -> tuple[str, list] | None:
    """(field, its user turns as given) when the row holds a conversation as a list."""
    for key in ("turns", "prompt", "messages"):
        v = obj.get(key)
        if isinstance(v, list):
            if key == "messages":
                v = [m for m in v if isinstance(m, dict) and m.get("role", "user") == "user"]
            return key, v
    return None


def _first_turn(obj: dict) -> tuple[str | None, int]:
    """(first user turn, number of turns) from whichever field the row has."""
    conv = _user_turns(obj)
    if conv is not None and conv[1]:
        return _text(conv[1][0]), len(conv[1])
    for key in ("prompt", "text", "question", "instruction"):
        if isinstance(obj.get(key), str):
            return obj[key], 1
    return None, 0


def _later_turns(obj: dict, where: str) -> tuple[str, ...]:
    """A conversation's user turns after the first (multi_turn); one line for a
    conversation with no turns or a turn that is not text."""
    conv = _user_turns(obj)
    if conv is None:
        return ()
    key, turns = conv
    if not turns:
        raise DatasetFormatError(f"{where}: a conversation with no turns ({key!r} is empty)")
    texts = []
    for k, t in enumerate(turns, 1):
        text = _text(t)
        if text is None or not text.strip():
            got = "empty text" if text is not None else type(t).__name__
            raise DatasetFormatError(f"{where}: turn {k} of {key!r} is not a string ({got})")
        texts.append(text)
    return tuple(texts[1:])


def _row_id(obj: dict, category: str, n: int) -> str:
    for key in ("id", "question_id"):
        if obj.get(key) is not None and not isinstance(obj[key], (dict, list)):
            return str(obj[key])
    return f"{category}-{n:02d}"


def _shape_error(kind: str, where: str, obj) -> DatasetFormatError:
    need = {"specc": '"category" and "prompt" (or "turns")',
            "mt_bench": '"category" and "turns" (a list of strings)',
            "spec_bench": '"category" and "turns" (a list of strings)',
            "speed_bench": '"category" and "turns" (a list of strings) or "messages"'}[kind]
    got = ", ".join(sorted(obj)) if isinstance(obj, dict) else \
        "a JSON list (a ShareGPT file?)" if isinstance(obj, list) else type(obj).__name__
    return DatasetFormatError(f"{where}: not a {_NAMES[kind]} row: needs {need}; got {got}")


def _rows_to_prompts(kind: str, rows, where, output_len: int,
                     multi_turn: bool = False) -> tuple[list[Prompt], int]:
    """(prompts, placeholders skipped); ``where(i)`` names row i in messages. With
    ``multi_turn`` each prompt carries its conversation's later turns."""
    out: list[Prompt] = []
    per_cat: dict[str, int] = {}
    skipped = 0
    for i, obj in enumerate(rows):
        if not isinstance(obj, dict):
            raise _shape_error(kind if kind != "hf" else "specc", where(i), obj)
        conv = _user_turns(obj)
        if conv is not None and not conv[1]:
            raise DatasetFormatError(f"{where(i)}: a conversation with no turns "
                                     f"({conv[0]!r} is empty)")
        text, _ = _first_turn(obj)
        category = obj.get("category")
        if kind == "mt_bench" or kind == "spec_bench":
            ok = isinstance(obj.get("turns"), list) or isinstance(obj.get("prompt"), list)
        elif kind == "speed_bench":
            ok = isinstance(obj.get("turns"), list) or isinstance(obj.get("messages"), list)
        else:
            ok = True
        if kind == "hf":
            category = category if isinstance(category, str) and category else "all"
        if not ok or not isinstance(category, str) or not category.strip() or text is None:
            if kind == "hf":
                raise DatasetFormatError(f"{where(i)}: no prompt text: a row needs one of "
                                         f"turns, messages, prompt, text, question, instruction")
            raise _shape_error(kind, where(i), obj)
        if text.strip() == SPEED_PLACEHOLDER:
            skipped += 1
            continue
        if not text.strip():
            raise DatasetFormatError(f"{where(i)}: empty prompt text")
        category = category.strip()
        per_cat[category] = per_cat.get(category, 0) + 1
        out.append(Prompt(text=text, input_tokens=count_tokens(text), output_tokens=output_len,
                          category=category, id=_row_id(obj, category, per_cat[category]),
                          later=_later_turns(obj, where(i)) if multi_turn else ()))
    return out, skipped


# --------------------------------------------------------------------------- sources

def _read_jsonl(kind: str, path: str) -> tuple[list, Callable]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file ({kind} dataset)") from None
    except UnicodeDecodeError as e:
        raise DatasetFormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None
    rows, where_line = [], []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            hint = " (a JSON list: ShareGPT?)" if lineno == 1 and line.lstrip().startswith("[") \
                else ""
            raise DatasetFormatError(f"{path}:{lineno}: not JSON lines as {_NAMES[kind]} is "
                                     f"({e.msg} at column {e.colno}){hint}") from None
        where_line.append(lineno)
    return rows, lambda i: f"{path}:{where_line[i]}"


def _read_parquet(path: str) -> tuple[list, Callable]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise HubError(f"{path}: reading .parquet needs pyarrow: pip install 'specc[hf]', or "
                       f"export the rows as JSON lines") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several types for a bad file
        raise DatasetFormatError(f"{path}: not a readable parquet file ({e})") from None
    return rows, lambda i: f"{path}: row {i + 1}"


def hub_endpoint() -> tuple[str, int]:
    from urllib.parse import urlsplit

    u = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return u.hostname or "huggingface.co", u.port or (443 if u.scheme == "https" else 80)


def _offline() -> bool:
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes")
               for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _local_hint(dataset_id: str) -> str:
    return (f"use a local file instead: download {dataset_id}'s data on a machine that reaches "
            f"the hub and set benchmark.dataset=speed_bench|mt_bench|spec_bench|specc with "
            f"benchmark.dataset_path=<file>")


def _read_hub(dataset_id: str, subset: str | None, split: str) -> tuple[list, Callable]:
    """Rows of a hub dataset. The hub is probed first (3 s), so an unreachable hub is one
    clear line at once, not the library's retries; HF_HUB_OFFLINE=1 reads its cache."""
    import socket

    try:
        import datasets  # noqa: F401
    except ImportError:
        raise HubError(f"{dataset_id}: the hf dataset kind needs the datasets library "
                       f"(pip install 'specc[hf]'); or {_local_hint(dataset_id)}") from None
    if not _offline():
        host, port = hub_endpoint()
        try:
            socket.create_connection((host, port), timeout=3.0).close()
        except OSError as e:
            raise HubError(f"{dataset_id}: the Hugging Face hub ({host}:{port}) is not reachable "
                           f"from here ({e.strerror or type(e).__name__}); "
                           f"{_local_hint(dataset_id)}") from None
    try:
        ds = datasets.load_dataset(dataset_id, subset, split=split)
    except Exception as e:  # the library raises many types (missing, gated, bad split)
        raise HubError(f"{dataset_id}: cannot load (subset {subset!r}, split {split!r}): "
                       f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
                       f"{_local_hint(dataset_id)}") from None
    return list(ds), lambda i: f"{dataset_id}[{split}] row {i + 1}"


@lru_cache(maxsize=32)
def _load_cached(kind: str, path: str | None, stamp, output_len: int, subset, split,
                 multi_turn: bool = False) -> tuple[Prompt, ...]:
    if kind == "hf":
        if not path:
            raise DatasetError("hf dataset: set benchmark.dataset_path to a dataset id "
                               "(e.g. nvidia/SPEED-Bench)")
        rows, where = _read_hub(path, subset, split)
    elif path and str(path).endswith(".parquet"):
        if kind != "speed_bench":
            raise DatasetFormatError(f"{path}: a .parquet file is read as speed_bench only")
        rows, where = _read_parquet(path)
    else:
        rows, where = _read_jsonl(kind, path)  # type: ignore[arg-type]  # a file kind: its path was required
    if not rows:
        raise DatasetError(f"{path}: dataset is empty")
    prompts, skipped = _rows_to_prompts(kind, rows, where, output_len, multi_turn)
    if not prompts:
        if skipped:
            raise DatasetError(f"{path}: all {skipped} rows hold SPEED-Bench's placeholder text; "
                               f"fill them first with NVIDIA's prepare_data.py "
                               f"(Model-Optimizer examples/specdec_bench)")
        raise DatasetError(f"{path}: no usable prompts")
    return tuple(prompts)


def load(kind: str, *, path: str | None, output_len: int, categories=None,
         hf_subset: str | None = None, hf_split: str = "test",
         multi_turn: bool = False) -> list[Prompt]:
    """Every prompt of the set, in file order, restricted to ``categories`` when given
    (``multi_turn``: each with its conversation's later turns).

    Raises DatasetError (or a subclass: the format, the category, the hub) with
    one line naming the file or id.
    """
    if kind not in KINDS:
        raise DatasetError(f"unknown prompt set {kind!r} (expected one of {', '.join(KINDS)})")
    if output_len < 1:
        raise DatasetError(f"output_len must be >= 1, got {output_len}")
    if kind == "specc" and not path:
        path = str(SHIPPED)
    elif kind != "hf":
        if not path:
            raise DatasetError(f"{kind} dataset: a path is required")
        path = os.path.expanduser(str(path))
        if not os.path.isfile(path):
            raise DatasetError(f"{path}: no such file ({kind} dataset)")
    stamp = os.stat(path).st_mtime_ns if kind != "hf" else None  # type: ignore[arg-type]  # not hf: a path (above)
    prompts = list(_load_cached(kind, path, stamp, output_len, hf_subset, hf_split,
                                bool(multi_turn)))
    if categories:
        have = categories_of(prompts)
        missing = [c for c in categories if c not in have]
        if missing:
            raise CategoryError(f"{path}: no prompts in categor{'y' if len(missing) == 1 else 'ies'} "
                                f"{', '.join(map(repr, missing))}; it has: {', '.join(have)}")
        wanted = set(categories)
        prompts = [p for p in prompts if p.category in wanted]
    return prompts


def categories_of(prompts) -> list[str]:
    """Categories in order of first appearance."""
    seen: dict[str, None] = {}
    for p in prompts:
        seen.setdefault(p.category, None)
    return list(seen)


def sequence(prompts: list[Prompt], num: int) -> list[Prompt]:
    """``num`` requests, round-robin over categories (each in file order), cycling the set.

    The same prompts and ``num`` give the same sequence: matched baseline and
    speculative points send the same prompts in the same order.
    """
    if not prompts:
        raise DatasetError("no prompts to send")
    by_cat: dict[str | None, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    lists = list(by_cat.values())
    order: list[Prompt] = []
    for k in range(max(map(len, lists))):
        order.extend(lst[k] for lst in lists if k < len(lst))
    return [order[i % len(order)] for i in range(num)]
