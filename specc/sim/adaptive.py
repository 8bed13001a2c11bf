"""Speculation schedules by batch size, as the releases run them.

SGLang 0.5.23's adaptive mode (``--speculative-adaptive``, srt/speculative/
adaptive_spec_params.py): per batch-size key of its config, a slot with candidate
num_steps; each verify feeds the slot of the running batch (padded up to the next
CUDA-graph batch size, then the key at or below it) an EMA of accepted drafts; after
`warmup_batches`, every `update_interval` batches the slot moves down while the EMA is at
or below (previous step - 0.5 + down_hysteresis), else up while above (step - 0.5 +
up_hysteresis); 0 steps is no drafting, left by probing the next step up.

vLLM 0.32/0.33's ``num_speculative_tokens_per_batch_size`` (v1/spec_decode/dynamic/
utils.py): inclusive (start, end, K) ranges expanded to a dense lookup by the step's
scheduled requests, K clamped to num_speculative_tokens, gaps and the tail carrying the
previous K.

Both act on the engine's running batch, never on the client's concurrency: a client at
concurrency 32 keeps fewer than 32 requests decoding while some are in prefill or between
requests, so the schedule's band is that of the batch, not of the concurrency.
"""

from __future__ import annotations

import bisect
import json
import math

from specc.engines import sglang as sg


class ConfigError(ValueError):
    pass


def load_adaptive_config(path: str | None) -> tuple[dict, dict[int, dict]]:
    """0.5.23 ``_load_adaptive_config``: the file (or DEFAULT_ADAPTIVE_CONFIG) and its
    integer-string keys, each with a non-empty list of non-negative int candidate_steps."""
    if path is not None:
        try:
            with open(path) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"speculative_adaptive_config {path}: {e}") from None
    else:
        cfg = sg.DEFAULT_ADAPTIVE_CONFIG
    if not isinstance(cfg, dict):
        raise ConfigError("speculative_adaptive_config must be a JSON object")
    entries: dict[int, dict] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and s >= 0 for s in steps)):
            raise ConfigError(f"BS {key}: candidate_steps must be a list of non-negative "
                              f"ints, got {steps!r}")
        entries[int(key)] = entry
    if not entries:
        raise ConfigError("speculative_adaptive_config must contain at least one "
                          "integer-string BS key, e.g. {\"1\": {\"candidate_steps\": [1,3,7]}}. "
                          f"Got keys: {list(cfg.keys())}")
    return cfg, entries


def candidate_union(path: str | None) -> list[int]:
    return sorted({s for e in load_adaptive_config(path)[1].values()
                   for s in e["candidate_steps"]})


class Slot:
    """0.5.23 ``AdaptiveStepSlot``."""

    def __init__(self, initial_steps: int, cfg: dict):
        d = sg.ADAPTIVE_SLOT_DEFAULTS
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = cfg.get("ema_alpha", d["ema_alpha"])
        self.update_interval = cfg.get("update_interval", d["update_interval"])
        self.warmup_batches = cfg.get("warmup_batches", d["warmup_batches"])
        self.down_hysteresis = cfg.get("down_hysteresis", d["down_hysteresis"])
        self.up_hysteresis = cfg.get("up_hysteresis", d["up_hysteresis"])
        self.ceiling_coeff = cfg.get("ceiling_coeff", d["ceiling_coeff"])
        self.current_steps = (initial_steps if initial_steps in self.candidate_steps else
                              self.candidate_steps[len(self.candidate_steps) // 2])
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, correct: list[int]) -> bool:
        if not correct:
            return False
        if self.current_steps > 0:
            avg = sum(correct) / len(correct)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = old_idx = self.candidate_steps.index(old)
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                if self.ema_accept_len > self.candidate_steps[idx] - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target != old:
            self.current_steps = target
            return True
        return False


class Adaptive:
    """0.5.23 ``AdaptiveSpeculativeParams``: routes a batch size to its slot."""

    def __init__(self, initial_steps: int, path: str | None, graph_bs: list[int] | None):
        cfg, entries = load_adaptive_config(path)
        self.keys = sorted(entries)
        self.slots = {bs: Slot(initial_steps, {**cfg, **entries[bs]}) for bs in self.keys}
        self.graph_bs = sorted(graph_bs) if graph_bs else None
        #: batch size -> (decode steps, steps summed): what ran at each running batch size
        self.seen: dict[int, list[int]] = {}

    def route(self, batch: int) -> Slot:
        padded = batch
        if self.graph_bs is not None:
            i = bisect.bisect_left(self.graph_bs, batch)
            padded = self.graph_bs[i] if i < len(self.graph_bs) else batch
        i = bisect.bisect_right(self.keys, padded) - 1
        return self.slots[self.keys[max(0, i)]]

    def steps_for(self, batch: int) -> int:
        steps = self.route(batch).current_steps
        seen = self.seen.setdefault(batch, [0, 0])
        seen[0] += 1
        seen[1] += steps
        return steps

    def on_verify(self, correct: list[int], batch: int) -> int | None:
        slot = self.route(batch)
        return slot.current_steps if slot.update(correct) else None


def vllm_lookup(schedule, max_batch: int, max_k: int) -> list[int]:
    """0.33 ``build_dynamic_sd_schedule_lookup``: index = scheduled requests -> K."""
    if max_batch <= 0 or max_k <= 0:
        raise ConfigError("max batch size and num_speculative_tokens must be > 0")
    parsed = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ConfigError("each entry must be (range_start, range_end, "
                              "num_speculative_tokens)")
        s, e, k = (int(x) for x in entry)
        if s <= 0 or e <= 0 or s > e or k < 0:
            raise ConfigError(f"bad batch-size range ({s}, {e}, {k})")
        parsed.append((s, e, k))
    parsed.sort()
    prev = 0
    for s, e, _ in parsed:
        if s <= prev:
            raise ConfigError("Batch-size ranges must be non-overlapping and sorted.")
        prev = e
    if not parsed or parsed[0][0] != 1:
        raise ConfigError("The first batch-size range must start at 1")
    dense = [0] * (max_batch + 1)
    nxt, last = 1, None
    for s, e, k in parsed:
        if s > nxt and last is not None:
            for b in range(nxt, min(s, max_batch + 1)):
                dense[b] = min(max_k, last)
        for b in range(max(s, nxt), min(e, max_batch) + 1):
            dense[b] = min(max_k, k)
        nxt, last = max(nxt, e + 1), k
        if nxt > max_batch:
            break
    for b in range(nxt, max_batch + 1):
        dense[b] = min(max_k, last if last is not None else 0)
    return dense
