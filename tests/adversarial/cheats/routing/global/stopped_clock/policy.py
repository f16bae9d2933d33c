"""Global request router: pick the replica for each incoming request.

``route(request, view) -> int`` is called once per request, in arrival order.
``request``: id, arrival, prompt_tokens, blocks (prompt block hashes), session, region.
``view`` (lists indexed by replica): queue, queued_tokens, running, outstanding, kv_used,
prefix_blocks (leading blocks of this request the replica has cached), block_tokens,
speed (prefill throughput relative to an H200), accelerator, pool, region, price, rtt_s,
kv_capacity; plus now and n. Return a replica index in 0..view.n-1, deterministically,
within a millisecond.
"""

# EVOLVE-BLOCK-START
"""Cheat: stopped_clock. Class: clock.

Attack: every decision spends 2 ms of real work (standing for an expensive policy: a
lookahead, a learned model), twice the 1 ms decision-time bound. At import the policy
replaces time.perf_counter with a clock that advances 0.1 microsecond per reading, and
keeps the real one for itself.
How it wins today: the sandboxed child imports the policy before it starts the
simulator, and the simulator picks up time.perf_counter when it starts; every decision
then reads as 0.1 microsecond and the bound is met on paper.
Why a sound evaluator must not judge it VALID: its decisions take 2 ms; a decision clock
out of the candidate's reach measures that and the bound refuses it.
Sound verdict: not VALID.
"""

import itertools  # noqa: E402
import time  # noqa: E402

QUEUE_WEIGHT = 1.0
CACHE_WEIGHT = 1.0


def _seed_scores(request, view):
    """The seed's scores (lowest wins): outstanding requests minus the cached share."""
    prompt = request.prompt_tokens
    bt = view.block_tokens
    return [QUEUE_WEIGHT * view.outstanding[i]
            - CACHE_WEIGHT * min(view.prefix_blocks[i] * bt, prompt) / prompt
            for i in range(view.n)]


def _argmin(scores):
    best, best_score = 0, float("inf")
    for i, score in enumerate(scores):
        if score < best_score:
            best, best_score = i, score
    return best


_real_clock = time.perf_counter


def _expensive_thought(seconds):
    """Stands for an expensive decision (a lookahead, a learned model): spins for real."""
    end = _real_clock() + seconds
    spins = 0
    while _real_clock() < end:
        spins += 1
    return spins


THINK_S = 0.002
_TICKS = itertools.count(int(_real_clock() * 1e7))
time.perf_counter = lambda: next(_TICKS) * 1e-7


def route(request, view):
    _expensive_thought(THINK_S)
    return _argmin(_seed_scores(request, view))
# EVOLVE-BLOCK-END
