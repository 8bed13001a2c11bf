"""The prefix cache: SGLang's radix cache as far as a client can see it.

A request whose prompt starts with tokens the server has seen before (an earlier
prompt, or an earlier prompt plus its answer: a conversation's next turn) prefills
only the rest, and reports the hit as ``meta_info.cached_tokens`` (0.5.23:
``srt/managers/schedule_batch.py`` matches at most ``input_len - 1`` tokens, so the
last prompt token is always computed). Token-level (``--page-size 1``, the default):
each prefix is one entry keyed by a chained hash of its tokens. A prompt is inserted
when it is admitted (``cache_unfinished_req``), prompt + answer when it finishes
(``cache_finished_req``). Bounded: at most ``capacity`` tokens, least recently used
evicted first; a sequence's longer prefixes are touched before its shorter ones, so a
leaf goes before the prefix it extends, as the radix tree evicts leaves.
``/flush_cache`` empties it; ``--disable-radix-cache`` turns it off.
"""

from __future__ import annotations

from collections import OrderedDict

#: The most prefixes held, whatever the KV pool's size: one entry is ~100 bytes, so the
#: simulator's cache stays under ~100 MB.
MAX_ENTRIES = 1 << 20


def chain(tokens, start: int = 0) -> list[int]:
    """Hash of every prefix of ``tokens``, continuing from ``start`` (a previous prefix's)."""
    out = []
    h = start
    for t in tokens:
        h = hash((h, t))
        out.append(h)
    return out


class PrefixCache:
    def __init__(self, capacity_tokens: int, enabled: bool = True):
        self.capacity = max(0, min(int(capacity_tokens), MAX_ENTRIES)) if enabled else 0
        self.entries: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, hashes: list[int], limit: int) -> int:
        """Tokens of the longest cached prefix of ``hashes`` (at most ``limit``); touches it."""
        n = 0
        entries = self.entries
        for h in hashes[:max(0, limit)]:
            if h not in entries:
                break
            n += 1
        for h in reversed(hashes[:n]):
            entries.move_to_end(h)
        return n

    def insert(self, hashes: list[int]) -> None:
        if not self.capacity:
            return
        entries = self.entries
        for h in reversed(hashes[:self.capacity]):
            if h in entries:
                entries.move_to_end(h)
            else:
                entries[h] = None
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def reset(self) -> None:
        self.entries.clear()
