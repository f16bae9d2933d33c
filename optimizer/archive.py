"""The archive of evaluated candidates of one target: parents, inspirations, feedback.

Parents are drawn mostly from the best structures (exploitation) and sometimes from any
valid candidate (diversity); inspirations are the best of other structures; feedback is
the most recent candidates, failures included, so that reasons reach the next prompt.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from optimizer.records import (
    SEED_ID,
    WORKER_LOST,
    ArchiveEntry,
    CandidateState,
    candidate_id,
    candidate_number,
)
from optimizer.targets import TargetSpec


@dataclass
class Archive:
    target: TargetSpec
    entries: list[ArchiveEntry] = field(default_factory=list)
    structure_of: dict[str, str] = field(default_factory=dict)  # candidate id -> structure key
    hashes: dict[str, str] = field(default_factory=dict)  # content hash -> candidate id
    # candidates under evaluation (ids taken, not yet added) and their content hashes
    pending: dict[str, str] = field(default_factory=dict)  # content hash -> candidate id
    # candidates other workers evaluated (optimizer.worker): they breed, they are not counted
    theirs: set[str] = field(default_factory=set)
    # what the loop asks several times per candidate, kept as entries are added (at 1000
    # candidates sorting them on every question cost 5 ms per candidate)
    _by_id: dict[str, ArchiveEntry] = field(default_factory=dict, repr=False)
    _valid: list[ArchiveEntry] = field(default_factory=list, repr=False)
    _ranked: list[ArchiveEntry] | None = field(default=None, repr=False)
    _tops: list[ArchiveEntry] | None = field(default=None, repr=False)
    _top_number: int = field(default=1, repr=False)

    def __post_init__(self) -> None:
        entries, self.entries = self.entries, []
        for entry in entries:
            self._index(entry)

    def _index(self, entry: ArchiveEntry) -> None:
        self.entries.append(entry)
        self._by_id.setdefault(entry.id, entry)
        self._top_number = max(self._top_number, candidate_number(entry.id))
        if entry.state is CandidateState.VALID and entry.objectives:
            self._valid.append(entry)
            if self._ranked is not None:
                bisect.insort(self._ranked, entry, key=self._rank_key)
            self._tops = None

    def _rank_key(self, entry: ArchiveEntry) -> tuple[float, str]:
        sign = 1.0 if self.target.primary.minimize else -1.0
        return (sign * entry.objectives[0], entry.id)

    def add(self, entry: ArchiveEntry, structure: str = "", content_hash: str = "") -> None:
        self.pending.pop(content_hash, None)
        self.structure_of[entry.id] = structure
        self._tops = None
        self._index(entry)
        if content_hash:
            self.hashes[content_hash] = entry.id

    def next_id(self) -> str:
        """The id the next candidate of this target gets; ``SEED_ID`` is the seed's alone
        (with several slots the seed and the starts are admitted in any order)."""
        top = max([self._top_number, *(candidate_number(c) for c in self.pending.values())])
        return candidate_id(1 + top)

    def get(self, cid: str) -> ArchiveEntry:
        return self._by_id[cid]

    @property
    def seed(self) -> ArchiveEntry | None:
        """The seed, once it is evaluated (it need not be the first entry). A seed whose
        worker was lost is not evaluated: its re-run (another id, proposer "seed") is."""
        seed = self._by_id.get(SEED_ID)
        if seed is None or seed.reason != WORKER_LOST:
            return seed
        return next((e for e in self.entries if e.proposer == "seed" and e.id != SEED_ID
                     and e.reason != WORKER_LOST), None)

    def valid(self) -> list[ArchiveEntry]:
        return list(self._valid)

    def ranked(self) -> list[ArchiveEntry]:
        """Valid candidates, best first by the primary objective."""
        if self._ranked is None:
            self._ranked = sorted(self._valid, key=self._rank_key)
        return list(self._ranked)

    def best(self) -> ArchiveEntry | None:
        if self._ranked is None:
            self.ranked()
        assert self._ranked is not None
        return self._ranked[0] if self._ranked else None

    def best_per_structure(self) -> list[ArchiveEntry]:
        if self._tops is None:
            seen: set[str] = set()
            tops = []
            for entry in self.ranked():
                key = self.structure_of.get(entry.id, entry.id)
                if key not in seen:
                    seen.add(key)
                    tops.append(entry)
            self._tops = tops
        return list(self._tops)

    def pick_parent(self, rng: random.Random) -> ArchiveEntry:
        tops = self.best_per_structure()
        if not tops:
            assert self.seed is not None
            return self.seed
        if rng.random() < 0.75 or len(self._valid) == 1:
            return tops[min(len(tops) - 1, int(rng.expovariate(1.5)))]
        return rng.choice(self._valid)

    def inspirations(
        self, parent: ArchiveEntry, rng: random.Random, n: int = 3
    ) -> tuple[ArchiveEntry, ...]:
        others = [e for e in self.best_per_structure() if e.id != parent.id]
        picks = others[: n - 1]
        picked = {e.id for e in picks}
        rest = [e for e in self._valid if e.id != parent.id and e.id not in picked]
        if rest:
            picks.append(rng.choice(rest))
        return tuple(picks[:n])

    def feedback(self, n: int = 6) -> tuple[ArchiveEntry, ...]:
        return tuple(reversed(self.entries[-n:]))

    def structures(self) -> int:
        return len(set(self.structure_of.values()))
