"""Prompt datasets for specc's built-in load generator.

Three kinds, following SGLang's ``bench_serving`` where it has an equivalent:

- ``random``: synthetic prompts; input and output lengths uniform in
  ``[max(1, int(len * range_ratio)), len]`` (bench_serving's random dataset).
  Text is whitespace-separated words: the simulator counts one word as one token.
- ``jsonl``: one JSON object per line with ``"prompt"`` (or ``"text"``) and an
  optional ``"output_len"`` / ``"max_tokens"``; input tokens = word count.
- ``sharegpt``: a ShareGPT JSON list of ``{"conversations": [{"from", "value"}, ...]}``;
  the first human turn is the prompt, the following gpt reply gives the output
  length (unless ``output_len > 0`` overrides it, as ``--sharegpt-output-len``);
  pairs with prompt or output shorter than 4 tokens are skipped.

Prompt sets by category (``specc``, the default; ``mt_bench``, ``spec_bench``,
``speed_bench``, ``hf``) are read by :mod:`specc.prompts.promptsets`.

Token counts are word counts (what the simulator counts); against a real engine
they are an approximation, and the load generator takes the engine's reported
usage for output tokens whenever the stream carries it.

When a file yields fewer usable prompts than ``num``, its prompts are reused in
order until ``num`` are returned (sharegpt: after a seeded shuffle).
User-fixable problems raise :class:`DatasetError` with a one-line message that
names the file (and line where there is one).
"""

from __future__ import annotations

import json
import os
import random
from specc.prompts import DatasetError, Prompt, by_turn, count_tokens

__all__ = ["Prompt", "DatasetError", "load_prompts", "KINDS"]

KINDS = ("random", "jsonl", "sharegpt", "specc", "mt_bench", "spec_bench", "speed_bench", "hf")

#: bench_serving skips ShareGPT pairs shorter than this (prompt or reply tokens).
MIN_SHAREGPT_TOKENS = 4

# A fixed vocabulary so "random" text is deterministic and cheap to build.
_WORDS = (
    "the of and to in is was for on that with as by at from his her an were are "
    "which this be or has had not but what all when there can one more been if "
    "will would who each about many then them these so some into time only two "
    "new could other than first any may also after most over such where through "
    "model token draft target speculative decode server engine batch cache graph "
    "kernel tensor layer expert router accept length prompt output stream latency"
).split()


def load_prompts(kind: str, *, num: int, input_len: int, output_len: int,
                 range_ratio: float = 1.0, path: str | None = None,
                 seed: int = 0, categories=None, hf_subset: str | None = None,
                 hf_split: str = "test", multi_turn: bool = False, shared_prefix_len: int = 0,
                 shared_prefix_groups: int = 1) -> list[Prompt]:
    """``num`` requests; with ``multi_turn``, ``num`` conversations, each as its turns in
    order (``Prompt.turn``), every turn a request of its own. ``shared_prefix_len``: each
    first turn opens with its group's system prompt of that many tokens (shared_prefix)."""
    prompts = _load(kind, num=num, input_len=input_len, output_len=output_len,
                    range_ratio=range_ratio, path=path, seed=seed, categories=categories,
                    hf_subset=hf_subset, hf_split=hf_split, multi_turn=multi_turn)
    if shared_prefix_len > 0:
        prompts = shared_prefix(prompts, shared_prefix_len, shared_prefix_groups, seed)
    return prompts


def shared_prefix(prompts: list[Prompt], length: int, groups: int, seed: int) -> list[Prompt]:
    """Conversation c (each single-turn prompt is one) opens with group c mod ``groups``'s
    system prompt of ``length`` tokens, as SGLang bench_serving's generated-shared-prefix
    dataset (--gsp-system-prompt-len, --gsp-num-groups): a prefix cache holds it after the
    group's first request. Later turns carry it in the history."""
    from dataclasses import replace

    groups = max(1, groups)
    systems = []
    for g in range(groups):
        rng = random.Random(f"{seed}|shared-prefix|{g}")
        words = [f"system{g}"] + [rng.choice(_WORDS) for _ in range(length - 1)]
        systems.append(" ".join(words[:length]))
    out, c = [], -1
    for p in prompts:
        if p.turn == 1:
            c += 1
            p = replace(p, text=systems[c % groups] + "\n" + p.text,
                        input_tokens=p.input_tokens + length)
        out.append(p)
    return out


def _load(kind: str, *, num: int, input_len: int, output_len: int, range_ratio: float,
          path: str | None, seed: int, categories, hf_subset: str | None, hf_split: str,
          multi_turn: bool) -> list[Prompt]:
    if num < 0:
        raise DatasetError(f"num must be >= 0, got {num}")
    if multi_turn and kind in ("random", "jsonl"):
        raise DatasetError(f"the {kind} dataset has no conversations to send turn by turn")
    if kind in KINDS[3:]:
        from specc.prompts import promptsets

        out = promptsets.sequence(promptsets.load(
            kind, path=path, output_len=output_len, categories=categories,
            hf_subset=hf_subset, hf_split=hf_split, multi_turn=multi_turn), num)
        return by_turn(out) if multi_turn else out
    if categories:
        raise DatasetError(f"the {kind} dataset has no categories (categories: {categories})")
    if kind == "random":
        return _random(num, input_len, output_len, range_ratio, seed)
    if kind == "jsonl":
        return _fill(_jsonl(_need_path(kind, path), output_len), num, path)
    if kind == "sharegpt":
        items = _sharegpt(_need_path(kind, path), output_len, multi_turn)
        random.Random(seed).shuffle(items)
        items = _fill(items, num, path)
        return by_turn(items) if multi_turn else items
    raise DatasetError(f"unknown dataset kind {kind!r} (expected one of {', '.join(KINDS)})")


# --------------------------------------------------------------------------- random

def _bounds(length: int, range_ratio: float, what: str) -> tuple[int, int]:
    if length < 1:
        raise DatasetError(f"random dataset: {what} must be >= 1, got {length}")
    if not 0.0 <= range_ratio <= 1.0:
        raise DatasetError(f"random dataset: range_ratio must be in [0, 1], got {range_ratio}")
    return max(1, int(length * range_ratio)), length


def _random(num: int, input_len: int, output_len: int, range_ratio: float,
            seed: int) -> list[Prompt]:
    ilo, ihi = _bounds(input_len, range_ratio, "input_len")
    olo, ohi = _bounds(output_len, range_ratio, "output_len")
    rng = random.Random(seed)
    words = _WORDS
    nw = len(words)
    out = []
    for i in range(num):
        n_in = rng.randint(ilo, ihi)
        n_out = rng.randint(olo, ohi)
        # A per-prompt offset keeps prompts distinct (no accidental prefix caching).
        off = rng.randrange(nw)
        text = " ".join(words[(off + j * 7 + i) % nw] for j in range(n_in))
        out.append(Prompt(text=text, input_tokens=n_in, output_tokens=n_out))
    return out


# --------------------------------------------------------------------------- files

def _need_path(kind: str, path: str | None) -> str:
    if not path:
        raise DatasetError(f"{kind} dataset: a path is required")
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such file ({kind} dataset)")
    return path


def _fill(items: list[Prompt], num: int, path: str | None) -> list[Prompt]:
    if not items:
        raise DatasetError(f"{path}: dataset has no usable prompts")
    if num <= len(items):
        return items[:num]
    return [items[i % len(items)] for i in range(num)]


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read ({e.strerror})") from None


def _positive_int(value, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DatasetError(f"{where}: {key!r} must be a positive integer, got {value!r}")
    return value


def _jsonl(path: str, output_len: int) -> list[Prompt]:
    """The prompts of a jsonl file, read line by line as the compile-time check reads it
    (bounded lines, a FIFO or device refused)."""
    out = []
    for where, text, n_out in _jsonl_items(path):
        if n_out is None:
            if output_len < 1:
                raise DatasetError(f"{where}: no \"output_len\"/\"max_tokens\" and no output_len given")
            n_out = output_len
        out.append(Prompt(text=text, input_tokens=count_tokens(text), output_tokens=n_out))
    if not out:
        raise DatasetError(f"{path}: dataset is empty")
    return out


def _sharegpt(path: str, output_len: int, multi_turn: bool = False) -> list[Prompt]:
    raw = _read_text(path)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}:{e.lineno}: bad JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: ShareGPT file must hold a JSON list of conversations")
    if not data:
        raise DatasetError(f"{path}: dataset is empty")
    out = []
    for n, entry in enumerate(data):
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conv, list):
            continue
        later = _sharegpt_later(conv, f"{path}: entry {n}") if multi_turn else ()
        prompt = reply = None
        for i, turn in enumerate(conv):
            if isinstance(turn, dict) and turn.get("from") == "human" \
                    and isinstance(turn.get("value"), str):
                prompt = turn["value"]
                nxt = conv[i + 1] if i + 1 < len(conv) else None
                if isinstance(nxt, dict) and nxt.get("from") == "gpt" \
                        and isinstance(nxt.get("value"), str):
                    reply = nxt["value"]
                break
        if prompt is None or (reply is None and output_len <= 0):
            continue
        n_in = count_tokens(prompt)
        n_out = output_len if output_len > 0 else count_tokens(reply)  # type: ignore[arg-type]  # a reply (above)
        if n_in < MIN_SHAREGPT_TOKENS or n_out < MIN_SHAREGPT_TOKENS:
            continue
        out.append(Prompt(text=prompt, input_tokens=n_in, output_tokens=n_out,
                          id=str(entry.get("id", n)) if multi_turn else None, later=later))
    if not out:
        raise DatasetError(f"{path}: no usable conversations (need a human turn of >= "
                           f"{MIN_SHAREGPT_TOKENS} words and a gpt reply of >= "
                           f"{MIN_SHAREGPT_TOKENS} words)")
    return out


# --------------------------------------------------------------------------- compile-time check

#: A prompt longer than this many bytes is refused before it is read whole (no model's
#: context holds it: 8 MiB is millions of tokens).
MAX_PROMPT_BYTES = 8 << 20
#: A ShareGPT file is one JSON document, parsed whole: bounded (ShareGPT_V3 is ~650 MB).
MAX_SHAREGPT_BYTES = 1 << 30
#: Problems listed per file before the rest are summarised.
MAX_PROBLEMS = 5


class TokenCounter:
    """Counts a prompt's tokens with the target's tokenizer when one loads here (a local model
    directory and `transformers`), else a lower bound: one token per word (a tokenizer never
    puts two words in one token), so an estimate refuses only prompts surely too long."""

    def __init__(self, model_path: str | None = None):
        self.tokenizer = None
        if model_path and os.path.isdir(os.path.expanduser(model_path)):
            try:
                from transformers import AutoTokenizer   # optional: not a dependency

                self.tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(model_path))
            except Exception:   # noqa: BLE001 - not installed, or no tokenizer files
                self.tokenizer = None

    @property
    def how(self) -> str:
        return ("counted with the target's tokenizer" if self.tokenizer is not None else
                "estimated at one token per word (at least; no tokenizer loaded here)")

    def __call__(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text, add_special_tokens=False))
        return count_tokens(text)


def check_file(kind: str, path: str, *, output_len: int, context_length: int | None,
               counter: TokenCounter | None = None, multi_turn: bool = False) -> list[str]:
    """What is wrong with a jsonl or ShareGPT dataset file, before anything launches: one
    line each (at most MAX_PROBLEMS, then a count), naming the file and line. Reads the
    file streaming and bounded: a 200 MB prompt is refused without being held."""
    counter = counter or TokenCounter()
    problems: list[str] = []
    try:
        if multi_turn and kind == "jsonl":
            return [f"{path}: a jsonl dataset has no conversations to send turn by turn"]
        prompts = (_jsonl_items(path) if kind == "jsonl"
                   else _sharegpt_items(path, output_len, multi_turn))
        n = 0
        for where, text, n_out in prompts:
            n += 1
            problem = _prompt_problem(where, text, n_out, output_len, context_length, counter)
            if problem:
                problems.append(problem)
                if len(problems) > MAX_PROBLEMS:
                    break
        if n == 0:
            problems.append(f"{path}: dataset is empty" if kind == "jsonl" else
                            f"{path}: no usable conversations (a human turn of >= "
                            f"{MIN_SHAREGPT_TOKENS} words, then a gpt reply)")
    except DatasetError as e:
        problems.append(str(e))
    return capped(problems, path)


def capped(problems: list[str], path) -> list[str]:
    """At most MAX_PROBLEMS lines, then one that says more follow."""
    if len(problems) > MAX_PROBLEMS:
        return problems[:MAX_PROBLEMS] + [f"{path}: more problems after these (fix these first)"]
    return problems


def _prompt_problem(where, text, n_out, output_len, context_length, counter) -> str | None:
    if n_out is None:
        if output_len < 1:
            return f"{where}: no \"output_len\"/\"max_tokens\" and benchmark.output_len is {output_len}"
        n_out = output_len
    if context_length:
        if n_out >= context_length:
            return (f"{where}: asks for {n_out} output tokens, over the context length "
                    f"{context_length}")
        n_in = counter(text)
        if n_in + n_out > context_length:
            return (f"{where}: prompt of {n_in} tokens ({counter.how}) + {n_out} output tokens "
                    f"is over the context length {context_length}")
    return None


def _decode(raw: bytes, where: str) -> str:
    if b"\0" in raw:
        raise DatasetError(f"{where}: binary data (a NUL byte), not a text dataset")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def bounded_lines(path: str, kind: str = "jsonl"):
    """(where, line) per non-blank line of a text file, each line read to at most
    MAX_PROMPT_BYTES; a FIFO, a device or a directory refused before it is opened."""
    from specc.files import UnreadableFile, read_bounded

    try:   # a FIFO, a device, a directory: refused before it is opened for lines
        read_bounded(path, 0, tail=True)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file ({kind} dataset)") from None
    except UnreadableFile as e:
        raise DatasetError(str(e)) from None
    with open(path, "rb") as f:
        lineno = 0
        while True:
            raw = f.readline(MAX_PROMPT_BYTES + 1)
            if not raw:
                return
            lineno += 1
            where = f"{path}:{lineno}"
            if len(raw) > MAX_PROMPT_BYTES and not raw.endswith(b"\n"):
                raise DatasetError(f"{where}: a line over {MAX_PROMPT_BYTES >> 20} MiB (a prompt "
                                   "no model's context holds); not read further")
            line = _decode(raw, where)
            if line.strip():
                yield where, line


def _jsonl_items(path: str):
    """(where, prompt, output tokens or None) per line, each line read to at most
    MAX_PROMPT_BYTES."""
    for where, line in bounded_lines(path):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            why = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) \
                else "nested too deeply"
            raise DatasetError(f"{where}: bad JSON ({why})") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        text = obj.get("prompt", obj.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: needs a non-empty string \"prompt\" (or \"text\")")
        n_out = None
        for key in ("output_len", "max_tokens"):
            if obj.get(key) is not None:
                n_out = _positive_int(obj[key], where, key)
                break
        yield where, text, n_out


def _sharegpt_items(path: str, output_len: int, multi_turn: bool = False):
    from specc.files import UnreadableFile, read_bounded

    try:
        raw = read_bounded(path, MAX_SHAREGPT_BYTES)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file (sharegpt dataset)") from None
    except UnreadableFile as e:
        raise DatasetError(str(e)) from None
    text = _decode(raw, path)
    del raw
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}:{e.lineno}: bad JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise DatasetError(f"{path}: bad JSON (nested too deeply)") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: ShareGPT file must hold a JSON list of conversations")
    for i, entry in enumerate(data):
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conv, list):
            raise DatasetError(f"{path}: entry {i}: no \"conversations\" list")
        later = _sharegpt_later(conv, f"{path}: entry {i}") if multi_turn else ()
        human = next((k for k, t in enumerate(conv) if isinstance(t, dict)
                      and t.get("from") == "human" and isinstance(t.get("value"), str)), None)
        if human is None:
            continue   # bench_serving skips it too
        prompt = conv[human]["value"]
        if len(prompt.encode("utf-8", "surrogatepass")) > MAX_PROMPT_BYTES:
            raise DatasetError(f"{path}: entry {i}: a prompt over {MAX_PROMPT_BYTES >> 20} MiB "
                               "(no model's context holds it)")
        nxt = conv[human + 1] if human + 1 < len(conv) else None
        reply = nxt.get("value") if isinstance(nxt, dict) and nxt.get("from") == "gpt" else None
        if output_len <= 0 and not isinstance(reply, str):
            continue
        n_out = output_len if output_len > 0 else count_tokens(reply)  # type: ignore[arg-type]  # a reply (above)
        if count_tokens(prompt) < MIN_SHAREGPT_TOKENS or n_out < MIN_SHAREGPT_TOKENS:
            continue
        if later:   # the last turn carries every turn before it and the server's answers
            yield (f"{path}: entry {i} (its {1 + len(later)} turns with an answer each, as "
                   "the last turn sends them)", "\n".join((prompt, *later)),
                   n_out * (1 + len(later)))
            continue
        yield f"{path}: entry {i}", prompt, n_out


def _sharegpt_later(conv: list, where: str) -> tuple[str, ...]:
    """A ShareGPT conversation's human turns after the first (multi_turn: sent in order,
    each with the server's own answers; the recorded gpt replies are not sent)."""
    if not conv:
        raise DatasetError(f"{where}: a conversation with no turns")
    human = []
    for k, t in enumerate(conv):
        if isinstance(t, dict) and t.get("from") == "human":
            if not isinstance(t.get("value"), str) or not t["value"].strip():
                raise DatasetError(f"{where}: turn {k + 1} (\"from\": \"human\") has a "
                                   f"\"value\" that is not a string "
                                   f"({type(t.get('value')).__name__})")
            human.append(t["value"])
    return tuple(human[1:])


def write_sharegpt_source(path) -> None:
    """A ShareGPT-format file of specc's own prompts (each a two-turn conversation: the
    prompt and a reply), for bench_serving's random dataset, which samples token ids from
    ShareGPT and would download it from the Hub without a local file."""
    from pathlib import Path

    from specc.files import atomic_write

    src = Path(__file__).resolve().parents[1] / "data" / "prompts.jsonl"
    rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    convs = [{"id": r["id"], "conversations": [
        {"from": "human", "value": r["prompt"]},
        {"from": "gpt", "value": " ".join(r.get("turns") or [r["prompt"]])}]} for r in rows]
    atomic_write(Path(path), json.dumps(convs))


if __name__ == "__main__":   # plan.sh: python -m specc.prompts.datasets --sharegpt-source PATH
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--sharegpt-source":
        sys.exit("usage: python -m specc.prompts.datasets --sharegpt-source PATH")
    write_sharegpt_source(sys.argv[2])
