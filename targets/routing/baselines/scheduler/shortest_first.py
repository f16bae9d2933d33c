"""Shortest job first on the prefill work left (context minus cached tokens), as in
SJF/SRPT schedulers for LLM serving; 2,048-token chunks, youngest evicted."""


def schedule(queue, replica):
    return min(range(len(queue)),
               key=lambda i: (queue[i].context_tokens - queue[i].cached_tokens, i))


def chunk_size(request, replica):
    return min(2048, replica.token_budget)


def evict(running, replica):
    return len(running) - 1
