"""Power of two choices: sample two distinct replicas, keep the less loaded one."""

import random

_rng = random.Random(0)


def route(request, view):
    if view.n == 1:
        return 0
    a, b = _rng.sample(range(view.n), 2)
    return a if view.outstanding[a] <= view.outstanding[b] else b
