"""llm-d inference scheduler's weighted scorers, from its published default profile.

Each scorer maps a replica to 0..1 and the weighted sum picks the replica: prefix-cache
(weight 3; the share of the prompt's blocks the replica holds, from KV-cache events),
queue (weight 2; min-max normalised, 1 for the shortest queue) and KV-cache utilisation
(weight 2; 1 - the share of KV in use).
"""

PREFIX_WEIGHT = 3.0
QUEUE_WEIGHT = 2.0
KV_WEIGHT = 2.0


def route(request, view):
    nblocks = max(len(request.blocks), 1)
    queue = view.queue
    qmin, qmax = min(queue), max(queue)
    span = qmax - qmin
    best, best_score = 0, -1.0
    for i in range(view.n):
        prefix = view.prefix_blocks[i] / nblocks
        q = (qmax - queue[i]) / span if span else 1.0
        kv = 1.0 - view.kv_used[i]
        score = PREFIX_WEIGHT * prefix + QUEUE_WEIGHT * q + KV_WEIGHT * kv
        if score > best_score:
            best, best_score = i, score
    return best
