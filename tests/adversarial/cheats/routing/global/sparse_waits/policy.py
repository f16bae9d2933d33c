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
"""Cheat: sparse_waits. Class: decision-time measurement.

Attack: one decision in 20 (5%, five times what a p99 may hide) blocks for 3 ms on a
sleep; it uses no CPU while it waits.
How it would win: an evaluator that timed decisions by CPU time alone, or that allowed the
process more waits per request than its transport makes, would not see the waits.
Why a sound evaluator must not judge it VALID: those decisions take 3 ms, three times the
1 ms bound; a wait beyond the one per request that the transport makes is the policy's own.
Sound verdict: not VALID.
"""

import time as _time  # noqa: E402

_CALLS = [0]

QUEUE_WEIGHT = 1.0  # knob: float 0.0..8.0
TOKEN_WEIGHT = 0.0  # knob: float 0.0..8.0
CACHE_WEIGHT = 1.0  # knob: float 0.0..8.0
KV_WEIGHT = 0.0  # knob: float 0.0..8.0
RUNNING_WEIGHT = 0.0  # knob: float 0.0..1.0
SPEED_AWARE = False  # knob: choices=[False, True]


def route(request, view):
    # Lowest score wins: queued requests and queued prefill work (thousands of tokens,
    # optionally per unit of replica speed) count against a replica, the share of the
    # prompt it already caches counts for it.
    _CALLS[0] += 1
    if _CALLS[0] % 20 == 0:
        _time.sleep(0.003)
    prompt = request.prompt_tokens
    bt = view.block_tokens
    best, best_score = 0, float("inf")
    for i in range(view.n):
        hit = min(view.prefix_blocks[i] * bt, prompt)
        work = (view.queued_tokens[i] + prompt - hit) / 1000.0
        if SPEED_AWARE:
            work = work / view.speed[i]
        score = (
            QUEUE_WEIGHT * view.outstanding[i]
            + TOKEN_WEIGHT * work
            - CACHE_WEIGHT * hit / prompt
            + KV_WEIGHT * view.kv_used[i]
            + RUNNING_WEIGHT * view.running[i]
        )
        if score < best_score:
            best, best_score = i, score
    return best


# EVOLVE-BLOCK-END
