"""vLLM's default scheduler: first come first served (preempted requests first), prefill
chunks of 2,048 tokens (its default ``max_num_batched_tokens`` for online serving), and
recompute preemption of the youngest running sequence."""


def schedule(queue, replica):
    return 0


def chunk_size(request, replica):
    return min(2048, replica.token_budget)


def evict(running, replica):
    return len(running) - 1
