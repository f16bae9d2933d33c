"""Preble-style exploit/explore (E2) scheduling, from the paper's description.

Exploit: when a replica already caches more of the prompt than is left to compute, send
the request there (the longest match). Explore: otherwise pick the replica with the least
load, measured as the prefill work queued on it plus this request's uncached part,
divided by the replica's speed.
"""


def route(request, view):
    bt = view.block_tokens
    p = request.prompt_tokens
    hits = [min(b * bt, p) for b in view.prefix_blocks]
    best = max(range(view.n), key=hits.__getitem__)
    if hits[best] > p - hits[best]:
        return best
    cost = [(view.queued_tokens[i] + p - hits[i]) / view.speed[i] for i in range(view.n)]
    return min(range(view.n), key=cost.__getitem__)
