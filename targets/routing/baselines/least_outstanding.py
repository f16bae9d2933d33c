"""Least outstanding requests (queued + running); ties go to the lowest index."""


def route(request, view):
    load = view.outstanding
    return min(range(view.n), key=load.__getitem__)
