"""A small byte-level BPE tokenizer, trained in seconds, pure Python.

Text is split into pre-tokens (a run of letters/digits with its leading space, a run of
other symbols, a newline plus the following indentation); merges are learnt on the
distinct pre-tokens weighted by their counts, with an index from pair to the words that
hold it so that each merge only touches the words it changes. Vocabulary = 256 bytes +
the merges. The JSON form ({"merges": [[a, b], ...]}) is all that is stored.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

# One pre-token: optional space + word, optional space + symbol run, newline + indentation,
# or lone whitespace. Indentation is its own token so that code's structure is cheap.
_PRETOKEN = re.compile(r" ?[A-Za-z_][A-Za-z_0-9]*| ?[0-9]+| ?[^\sA-Za-z0-9_]+|\n[ \t]*|\s")


def pretokenize(text: str) -> list[str]:
    return _PRETOKEN.findall(text)


class BPETokenizer:
    """Byte-level BPE: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``."""

    def __init__(self, merges: list[tuple[int, int]]):
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: i for i, pair in enumerate(self.merges)}
        self.vocab: list[bytes] = [bytes([i]) for i in range(256)]
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _encode_word(self, word: str) -> list[int]:
        ids = list(word.encode("utf-8"))
        while len(ids) > 1:
            best, best_i = None, -1
            for i in range(len(ids) - 1):
                r = self.ranks.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            ids[best_i : best_i + 2] = [256 + best]
            # merges of the same rank further right are applied on the next pass
        return ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        cache = self._cache
        for word in pretokenize(text):
            ids = cache.get(word)
            if ids is None:
                ids = self._encode_word(word)
                if len(cache) < 200_000:
                    cache[word] = ids
            out.extend(ids)
        return out

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", "replace")

    def to_json(self) -> str:
        return json.dumps({"merges": [list(m) for m in self.merges]})

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        return cls([tuple(m) for m in json.loads(text)["merges"]])

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        return cls.from_json(path.read_text())


def train_bpe(text: str, vocab_size: int) -> BPETokenizer:
    """Learn ``vocab_size - 256`` merges on ``text`` (deterministic: ties by pair order)."""
    if vocab_size < 256:
        raise ValueError(f"vocab_size must be >= 256 (the bytes), not {vocab_size}")
    counts = Counter(pretokenize(text))
    words = [list(w.encode("utf-8")) for w in counts]
    freqs = list(counts.values())
    pair_count: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for wi, ids in enumerate(words):
        f = freqs[wi]
        for pair in zip(ids, ids[1:], strict=False):
            pair_count[pair] += f
            where[pair].add(wi)
    # Max-heap with lazy deletion: stale entries are skipped when their count changed.
    heap = [(-c, pair) for pair, c in pair_count.items()]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    while len(merges) < vocab_size - 256 and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or -neg <= 1:
            if pair_count.get(pair, 0) > 1 and pair_count[pair] != -neg:
                heapq.heappush(heap, (-pair_count[pair], pair))
            continue
        new_id = 256 + len(merges)
        merges.append(pair)
        touched: set[tuple[int, int]] = set()
        for wi in list(where.pop(pair, ())):
            ids, f = words[wi], freqs[wi]
            for p in zip(ids, ids[1:], strict=False):
                pair_count[p] -= f
                touched.add(p)
            merged: list[int] = []
            i = 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            words[wi] = merged
            for p in zip(merged, merged[1:], strict=False):
                pair_count[p] += f
                where[p].add(wi)
                touched.add(p)
        pair_count.pop(pair, None)
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 1 and p != pair:
                heapq.heappush(heap, (-c, p))
    return BPETokenizer(merges)
