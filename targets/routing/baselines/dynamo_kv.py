"""NVIDIA Dynamo's KV-aware router cost, from its published description.

cost = OVERLAP_WEIGHT * prefill_blocks + decode_blocks, lowest wins (temperature 0):
prefill_blocks are the request's blocks the replica would have to compute (not in its
cache), decode_blocks the blocks the replica would then hold active (KV in use, queued
prompts and this request).
"""

OVERLAP_WEIGHT = 1.0


def route(request, view):
    bt = view.block_tokens
    nblocks = request.prompt_tokens / bt
    best, best_cost = 0, float("inf")
    for i in range(view.n):
        prefill = nblocks - view.prefix_blocks[i]
        active = (view.kv_used[i] * view.kv_capacity[i] + view.queued_tokens[i]) / bt + nblocks
        cost = OVERLAP_WEIGHT * prefill + active
        if cost < best_cost:
            best, best_cost = i, cost
    return best
