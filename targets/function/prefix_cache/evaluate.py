"""Trusted cache simulator for the prefix_cache target.

It runs on the trusted side; ``program_path`` names a stand-in whose ``eviction_score``
runs the candidate's in a sandboxed process (evaluators/function/harness.py), asked once per
eviction about the sampled entries' (now, last_access, hits, depth), by value: the policy
never sees the workload, the cache or the simulator.
"""

from __future__ import annotations

import importlib.util
import math
import random
import uuid

from evaluators.function.harness import batched

CAPACITY = 600  # blocks
REQUESTS = 2500


def _load(program_path: str):
    name = f"_candidate_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, program_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def workload(seed: int, n: int = REQUESTS) -> list[tuple[int, ...]]:
    """Chains of block ids: tenant system prompt -> Zipf-popular document -> session turns."""
    rng = random.Random(seed)
    tenants = [tuple(rng.getrandbits(40) for _ in range(rng.randint(2, 6))) for _ in range(8)]
    docs = [tuple(rng.getrandbits(40) for _ in range(rng.randint(4, 30))) for _ in range(400)]
    doc_weights = [1.0 / (i + 1) ** 1.1 for i in range(len(docs))]
    sessions: list[tuple[int, ...]] = []
    out = []
    for _ in range(n):
        if sessions and rng.random() < 0.35:  # a follow-up turn extends a recent session
            k = min(len(sessions) - 1, int(rng.expovariate(0.3)))
            chain = sessions[-1 - k] + tuple(rng.getrandbits(40) for _ in range(rng.randint(1, 4)))
            sessions[-1 - k] = chain
        else:
            tenant = tenants[min(7, int(rng.expovariate(0.7)))]
            doc = rng.choices(docs, doc_weights)[0]
            chain = tenant + doc + tuple(rng.getrandbits(40) for _ in range(rng.randint(1, 6)))
            sessions.append(chain)
            if len(sessions) > 64:
                sessions.pop(0)
        out.append(chain)
    return out


def simulate(mod, chains, capacity: int = CAPACITY, seed: int = 7) -> dict[str, float]:
    """Replay ``chains`` through a cache of ``capacity`` blocks evicting by the policy.

    Per request: the chain's cached prefix is a hit (and refreshed); every block after the
    first miss is refreshed if cached, or inserted. When the insertions overflow the cache,
    each eviction samples SAMPLE_SIZE of the blocks cached when the request arrived (the
    request's own new blocks are pinned until it is served) and evicts the highest score.
    The policy is asked once per request about every sampled block, by value: one round trip
    where asking per eviction cost ten (27,600 evictions in the default workload).
    """
    rng = random.Random(seed)
    score = mod.eviction_score
    sample = max(1, int(mod.SAMPLE_SIZE))
    # block key = (parent key, block id) so that equal blocks under different prefixes differ
    meta: dict[tuple, list] = {}  # key -> [last_access, hits, depth]
    keys: list[tuple] = []  # for O(1) random sampling
    pos: dict[tuple, int] = {}
    hit_blocks = total_blocks = 0

    def evict(victim: tuple) -> None:
        i = pos.pop(victim)
        last = keys.pop()
        if last != victim:
            keys[i] = last
            pos[last] = i
        del meta[victim]

    def scores_of(now: int, picked: list[tuple]) -> dict[tuple, float]:
        unique = list(dict.fromkeys(picked))
        got = batched(score, [(now, *meta[k]) for k in unique])
        values = [float(v) for v in got]
        assert len(values) == len(unique) and all(map(math.isfinite, values)), (
            f"eviction_score gave {got!r} for {len(unique)} entries")
        return dict(zip(unique, values, strict=True))

    for now, chain in enumerate(chains):
        parent: tuple = ()
        matching = True
        new: list[tuple[tuple, int]] = []
        for depth, block in enumerate(chain):
            key = (hash(parent), block)  # ints and tuples hash the same in every process
            total_blocks += 1
            entry = meta.get(key)
            if matching and entry is not None:
                hit_blocks += 1
                entry[0] = now
                entry[1] += 1
            else:
                matching = False
                if entry is None:
                    new.append((key, depth))
                else:
                    entry[0] = now
            parent = key
        # never more evictions than cached blocks: a request longer than the cache keeps its
        # own blocks (pinned) and the cache overflows until the next request
        overflow = min(len(keys), len(keys) + len(new) - capacity)
        if overflow > 0:
            draws = [[keys[rng.randrange(len(keys))] for _ in range(sample)]
                     for _ in range(overflow)]
            scores = scores_of(now, [k for picks in draws for k in picks])
            for picks in draws:
                alive = [k for k in picks if k in meta]
                while not alive:  # every pick already evicted: sample the cache again
                    alive = [keys[rng.randrange(len(keys))] for _ in range(sample)]
                    scores.update(scores_of(now, alive))
                evict(max(alive, key=lambda k: scores[k]))  # max: the first highest
        for key, depth in new:
            meta[key] = [now, 0, depth]
            pos[key] = len(keys)
            keys.append(key)
    return {"hit_ratio": hit_blocks / total_blocks, "blocks": float(total_blocks)}


def validate(program_path: str) -> None:
    mod = _load(program_path)
    size = mod.SAMPLE_SIZE
    assert isinstance(size, int) and 1 <= size <= 64, (
        f"SAMPLE_SIZE must be an int in 1..64: {size!r}"
    )
    for args in ((10, 3, 0, 1), (5, 5, 9, 40), (1000, 1, 100, 0)):
        value = mod.eviction_score(*args)
        assert isinstance(value, int | float), f"eviction_score returned {type(value).__name__}"
        assert math.isfinite(value), f"eviction_score{args} = {value}"
        assert value == mod.eviction_score(*args), "eviction_score is not deterministic"
    small = simulate(mod, workload(123, 200), capacity=50)
    assert 0.0 <= small["hit_ratio"] <= 1.0


def evaluate(program_path: str) -> dict[str, float]:
    return simulate(_load(program_path), workload(seed=1))


def evaluate_held_out(program_path: str) -> dict[str, float]:
    return simulate(_load(program_path), workload(seed=2), seed=11)


def fuzz_domain():
    """eviction_score's domain, for differential fuzzing: request counters and ages from 0 to
    a night's workload and beyond, hits and chain depths from 0 up."""
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        last = draw(st.integers(0, 10**6))
        now = last + draw(st.one_of(st.sampled_from([0, 1]), st.integers(0, 10**6)))
        return now, last, draw(st.integers(0, 10**4)), draw(st.integers(0, 512))

    return {"eviction_score": args()}


def fuzz_check(name, args, result):
    assert isinstance(result, int | float) and not isinstance(result, bool), (
        f"eviction_score returned {type(result).__name__}, not a number")
    assert math.isfinite(result), f"eviction_score{args} = {result}"
