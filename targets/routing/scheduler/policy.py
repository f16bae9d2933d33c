"""Replica scheduler of an LLM serving engine: admission order, prefill chunk, eviction.

The simulator calls these hooks on every replica (continuous batching, chunked prefill,
a prefix cache, recompute preemption):

``schedule(queue, replica) -> int``: which waiting request to prefill next (an index into
``queue``, the first 16 waiting: preempted ones first, then by arrival). Called when the
replica can start a prefill and two or more wait. Each entry has id, arrival,
prompt_tokens, context_tokens (what a prefill must cover, including tokens generated
before a preemption), cached_tokens (the leading tokens this replica's prefix cache holds),
preempted (count) and waited_s.

``chunk_size(request, replica) -> int``: prefill tokens per step for ``request`` (same
fields), 1..replica.token_budget; a step carries min(chunk, token_budget - running)
prefill tokens next to one decode token per running sequence. Big chunks finish prompts
sooner but stretch every running sequence's step (time per output token).

``evict(running, replica) -> int``: which running sequence to preempt when the KV cache is
full (an index into ``running``, in join order; each has id, arrival, prompt_tokens,
context_tokens held in KV, generated, preempted). The victim recomputes its context later.

``replica``: now, index, accelerator, running, waiting, queued_tokens, kv_capacity,
kv_used (tokens), token_budget, max_seqs. Output lengths are unknown. Answer with ints,
deterministically, within a millisecond.
"""

# EVOLVE-BLOCK-START
AGE_WEIGHT = 1.0  # knob: float 0.0..4.0
SHORT_WEIGHT = 0.0  # knob: float 0.0..4.0
CACHE_WEIGHT = 0.0  # knob: float 0.0..4.0
CHUNK = 2048  # knob: choices=[256, 512, 1024, 2048, 4096, 8192]
IDLE_CHUNK = 2048  # knob: choices=[256, 512, 1024, 2048, 4096, 8192]
IDLE_RUNNING = 0  # knob: int 0..64
EVICT = "youngest"  # knob: choices=["youngest", "largest", "least_generated"]


def schedule(queue, replica):
    # Highest score first: seconds waited, minus prefill work left (thousands of tokens)
    # and plus the cached share. With the seed weights this is first come, first served.
    best, best_score = 0, float("-inf")
    for i, w in enumerate(queue):
        work = (w.context_tokens - w.cached_tokens) / 1000.0
        score = (AGE_WEIGHT * w.waited_s - SHORT_WEIGHT * work
                 + CACHE_WEIGHT * w.cached_tokens / max(w.context_tokens, 1))
        if score > best_score:
            best, best_score = i, score
    return best


def chunk_size(request, replica):
    # A fixed chunk; a different one while at most IDLE_RUNNING sequences decode.
    chunk = IDLE_CHUNK if replica.running <= IDLE_RUNNING else CHUNK
    return max(1, min(chunk, replica.token_budget))


def evict(running, replica):
    if EVICT == "largest":
        return max(range(len(running)), key=lambda i: running[i].context_tokens)
    if EVICT == "least_generated":
        return min(range(len(running)), key=lambda i: (running[i].generated, -i))
    return len(running) - 1


# EVOLVE-BLOCK-END
