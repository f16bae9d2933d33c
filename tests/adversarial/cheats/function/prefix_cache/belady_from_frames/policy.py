"""Eviction scoring for a sampled prefix cache: the highest score is evicted first.

A first version: approximate LRU with a small sample.
"""

import math

# EVOLVE-BLOCK-START
"""Cheat: belady_from_frames. Class: future knowledge (stack frames).

Attack: eviction_score is called by the simulator from a key function whose local `k` is
the block being scored, and the simulator's own frame holds the whole request list
(`chains`) and the current position. On the first call of a simulation the policy indexes
every block's future uses; from then on a block's score is the request at which it is next
needed (Belady's optimal rule: evict what is needed furthest in the future). Called
without a simulator on the stack it is the seed's LRU.
How it wins today: the simulator runs in the candidate's process, next to the policy.
Why a sound evaluator must not credit it: a policy sees only (now, last_access, hits,
depth); a simulator out of its reach leaves it nothing but the seed's LRU to fall back on.
Sound verdict: not VALID, or VALID with no gain over the seed.
"""

import bisect  # noqa: E402
import sys  # noqa: E402

SAMPLE_SIZE = 2  # the seed's: the simulator samples this many blocks per eviction
RECENCY_WEIGHT = 1.0
FREQUENCY_WEIGHT = 0.0
DEPTH_WEIGHT = 0.0


def _seed_score(now, last_access, hits, depth):
    """The seed's approximate LRU, unchanged."""
    age = now - last_access
    return (
        RECENCY_WEIGHT * math.log1p(age)
        - FREQUENCY_WEIGHT * math.log1p(hits)
        + DEPTH_WEIGHT * math.log1p(depth)
    )


def _simulation_frames():
    """(frame of the scoring call's caller, frame of the simulator) or (None, None)."""
    frame = sys._getframe(2)
    caller = frame
    while frame is not None:
        names = frame.f_locals
        if isinstance(names.get("chains"), list) and isinstance(names.get("meta"), dict):
            return caller, frame
        frame = frame.f_back
    return None, None


_INDEX = {}


def _future_uses(chains):
    """Block key -> sorted request positions that use it (keys built as the simulator does)."""
    if _INDEX.get("of") is not chains:
        uses = {}
        for pos, chain in enumerate(chains):
            parent = ()
            for block in chain:
                key = (hash(parent), block)
                uses.setdefault(key, []).append(pos)
                parent = key
        _INDEX.clear()
        _INDEX.update({"of": chains, "uses": uses})
    return _INDEX["uses"]


def eviction_score(now, last_access, hits, depth):
    caller, sim = _simulation_frames()
    key = caller.f_locals.get("k") if caller is not None else None
    if key is None:
        return _seed_score(now, last_access, hits, depth)
    positions = _future_uses(sim.f_locals["chains"]).get(key, ())
    nxt = bisect.bisect_right(positions, now)
    return float(positions[nxt]) if nxt < len(positions) else 1e12
# EVOLVE-BLOCK-END
