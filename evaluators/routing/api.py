"""What a router policy is shown: :class:`RequestInfo` and :class:`View` (plain records).

Both sides build them: the trusted simulator (evaluators/routing/sim.py) for the in-process
baselines, and the candidate's sandboxed process (evaluators/routing/child.py) from the
plain data that crosses the channel for each decision. They hold only what a real router
knows when a request arrives: nothing of output lengths, future requests or the
simulator's state. The scheduler hooks' records are in evaluators/routing/sched.py.
"""

from __future__ import annotations

__all__ = ["RequestInfo", "View"]


class RequestInfo:
    """What the router knows of a request (its output length is unknown to it)."""

    __slots__ = ("id", "arrival", "prompt_tokens", "blocks", "session", "region")

    def __init__(self, id: int, arrival: float, prompt_tokens: int, blocks: tuple[int, ...],
                 session: int, region: str):
        self.id, self.arrival, self.prompt_tokens = id, arrival, prompt_tokens
        self.blocks, self.session, self.region = blocks, session, region


class View:
    """Every replica's state at ``now``; lists are indexed by replica.

    queue: waiting requests; queued_tokens: prefill tokens still to compute for them;
    running: decoding sequences; kv_used: fraction of KV cache in use; prefix_blocks:
    leading blocks of *this* request already in the replica's prefix cache (as a router fed
    by KV-cache events knows it); block_tokens: tokens per block; outstanding: queue +
    running; speed: prefill throughput relative to an H200; accelerator, pool, region,
    price (USD/h), rtt_s (round trip from this request's region), kv_capacity (tokens).
    """

    __slots__ = ("now", "n", "queue", "queued_tokens", "running", "kv_used", "prefix_blocks",
                 "block_tokens", "outstanding", "speed", "accelerator", "pool", "region",
                 "price", "rtt_s", "kv_capacity")
    now: float
    n: int
    queue: list[int]
    queued_tokens: list[int]
    running: list[int]
    kv_used: list[float]
    prefix_blocks: list[int]
    block_tokens: int
    outstanding: list[int]
    speed: list[float]
    accelerator: list[str]
    pool: list[str]
    region: list[str]
    price: list[float]
    rtt_s: list[float]
    kv_capacity: list[int]


# the fields of View fixed for a run, sent with the first request of a session
STATIC = ("n", "block_tokens", "speed", "accelerator", "pool", "region", "price",
          "kv_capacity")
