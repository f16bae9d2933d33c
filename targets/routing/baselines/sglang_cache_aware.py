"""SGLang router's cache-aware policy, from its published description.

The router keeps an approximate radix tree per worker of the prompts it sent there (it
never sees the engine's cache). When load is imbalanced - the busiest and idlest worker
differ by more than ``BALANCE_ABS`` requests and by a factor above ``BALANCE_REL`` - it
sends the request to the least loaded worker. Otherwise it follows the longest prefix
match if the matched share of the prompt exceeds ``CACHE_THRESHOLD``, and else the worker
whose tree is smallest (the most cache room). Here the tree holds prompt block hashes;
SGLang's default size bound (2**26 characters) is never reached in an hour, so it has none.
"""

CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5

_trees = []


def route(request, view):
    while len(_trees) < view.n:
        _trees.append(set())
    load = view.outstanding
    lo, hi = min(load), max(load)
    blocks = request.blocks
    if hi - lo > BALANCE_ABS and hi > lo * BALANCE_REL:
        k = load.index(lo)
    else:
        best, best_len = 0, -1
        for i in range(view.n):
            tree, m = _trees[i], 0
            for h in blocks:
                if h not in tree:
                    break
                m += 1
            if m > best_len:
                best, best_len = i, m
        rate = best_len / len(blocks) if blocks else 0.0
        if rate > CACHE_THRESHOLD:
            k = best
        else:
            sizes = [len(t) for t in _trees[: view.n]]
            k = sizes.index(min(sizes))
    _trees[k].update(blocks)
    return k
