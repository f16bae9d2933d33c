"""Round-robin: replicas in turn, blind to load and cache."""

_next = [0]


def route(request, view):
    k = _next[0] % view.n
    _next[0] += 1
    return k
