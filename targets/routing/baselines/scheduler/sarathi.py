"""Sarathi-Serve's stall-free batching: FCFS with small prefill chunks (512 tokens, the
budget its paper picks for strict decode-latency targets) so decodes never wait behind a
long prefill; youngest evicted."""


def schedule(queue, replica):
    return 0


def chunk_size(request, replica):
    return min(512, replica.token_budget)


def evict(running, replica):
    return len(running) - 1
