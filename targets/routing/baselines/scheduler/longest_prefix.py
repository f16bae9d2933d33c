"""SGLang's longest-prefix-match order: the waiting request with the most tokens in the
prefix cache first (ties in queue order); 2,048-token chunks, youngest evicted."""


def schedule(queue, replica):
    return max(range(len(queue)), key=lambda i: (queue[i].cached_tokens, -i))


def chunk_size(request, replica):
    return min(2048, replica.token_budget)


def evict(running, replica):
    return len(running) - 1
