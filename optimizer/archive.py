"""The archive of evaluated candidates of one target: parents, inspirations, feedback.

Parents are drawn mostly from the best structures (exploitation) and sometimes from any
valid candidate (diversity); inspirations are the best of other structures; feedback is
the most recent candidates, failures included, so that reasons reach the next prompt.
"""

from __future__ import annotations

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

    def add(self, entry: ArchiveEntry, structure: str = "", content_hash: str = "") -> None:
        self.pending.pop(content_hash, None)
        self.entries.append(entry)
        self.structure_of[entry.id] = structure
        if content_hash:
            self.hashes[content_hash] = entry.id

    def next_id(self) -> str:
        """The id the next candidate of this target gets; ``SEED_ID`` is the seed's alone
        (with several slots the seed and the starts are admitted in any order)."""
        taken = [SEED_ID, *(e.id for e in self.entries), *self.pending.values()]
        return candidate_id(1 + max(candidate_number(c) for c in taken))

    def get(self, cid: str) -> ArchiveEntry:
        for entry in self.entries:
            if entry.id == cid:
                return entry
        raise KeyError(cid)

    @property
    def seed(self) -> ArchiveEntry | None:
        """The seed, once it is evaluated (it need not be the first entry). A seed whose
        worker was lost is not evaluated: its re-run (another id, proposer "seed") is."""
        return next((e for e in self.entries if e.id == SEED_ID and e.reason != WORKER_LOST),
                    None) or next((e for e in self.entries if e.proposer == "seed"
                                   and e.id != SEED_ID and e.reason != WORKER_LOST), None)

    def valid(self) -> list[ArchiveEntry]:
        return [e for e in self.entries if e.state is CandidateState.VALID and e.objectives]

    def ranked(self) -> list[ArchiveEntry]:
        """Valid candidates, best first by the primary objective."""
        sign = 1.0 if self.target.primary.minimize else -1.0
        return sorted(self.valid(), key=lambda e: (sign * e.objectives[0], e.id))

    def best(self) -> ArchiveEntry | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def best_per_structure(self) -> list[ArchiveEntry]:
        seen: set[str] = set()
        out = []
        for entry in self.ranked():
            key = self.structure_of.get(entry.id, entry.id)
            if key not in seen:
                seen.add(key)
                out.append(entry)
        return out

    def pick_parent(self, rng: random.Random) -> ArchiveEntry:
        tops = self.best_per_structure()
        if not tops:
            assert self.seed is not None
            return self.seed
        if rng.random() < 0.75 or len(self.valid()) == 1:
            return tops[min(len(tops) - 1, int(rng.expovariate(1.5)))]
        return rng.choice(self.valid())

    def inspirations(
        self, parent: ArchiveEntry, rng: random.Random, n: int = 3
    ) -> tuple[ArchiveEntry, ...]:
        others = [e for e in self.best_per_structure() if e.id != parent.id]
        picks = others[: n - 1]
        rest = [e for e in self.valid() if e.id != parent.id and e not in picks]
        if rest:
            picks.append(rng.choice(rest))
        return tuple(picks[:n])

    def feedback(self, n: int = 6) -> tuple[ArchiveEntry, ...]:
        return tuple(reversed(self.entries[-n:]))

    def structures(self) -> int:
        return len(set(self.structure_of.values()))
