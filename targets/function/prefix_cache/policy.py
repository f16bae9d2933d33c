"""Eviction scoring for a sampled prefix cache: the highest score is evicted first.

A first version: approximate LRU with a small sample.
"""

import math

# EVOLVE-BLOCK-START
SAMPLE_SIZE = 2  # knob: int 1..32 log
RECENCY_WEIGHT = 1.0  # knob: float 0.0..4.0
FREQUENCY_WEIGHT = 0.0  # knob: float 0.0..4.0
DEPTH_WEIGHT = 0.0  # knob: float -2.0..2.0


def eviction_score(now, last_access, hits, depth):
    """now/last_access: request counter; hits: times reused; depth: position in its chain."""
    age = now - last_access
    return (
        RECENCY_WEIGHT * math.log1p(age)
        - FREQUENCY_WEIGHT * math.log1p(hits)
        + DEPTH_WEIGHT * math.log1p(depth)
    )


# EVOLVE-BLOCK-END
