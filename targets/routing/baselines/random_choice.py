"""Uniformly random replica (seeded, so a run is reproducible)."""

import random

_rng = random.Random(0)


def route(request, view):
    return _rng.randrange(view.n)
