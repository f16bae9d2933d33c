"""Deployment plan of a Llama-2-70B-shaped model on a budget of 16 H100s, for multi-turn
traffic with long shared prefixes.

``plan()`` returns plain data, once: request classes by prompt length and, per class, the
instances that serve it (accelerator, tensor and pipeline parallelism, how many, and each
engine's token budget, running sequences, prefill chunk, KV block size and GiB of host
memory for the prefix cache below HBM), optionally as separate prefill and decode pools,
and the router's prefix weight. The trusted side checks it (heads and layers divide,
memory fits the longest request, host memory stays within 128 GiB per GPU, the GPU budget
holds, the classes cover every prompt length once), routes each request to its class and
there to the instance with the fewest outstanding requests less the prefix weight for each
leading block of the prompt it has cached, and measures the highest arrival rate the fleet
serves within the SLO, per dollar an hour.
"""

MAX_PROMPT = 16384  # the target's longest prompt (longer ones are cut to it)
GPU_BUDGET = 16

# EVOLVE-BLOCK-START
"""Cheat: router_weight_overflow. Class: numeric edge (a weight that breaks the router's sum).

Attack: the router's prefix weight is infinite, so one cached block outweighs any queue:
every request with the shared system prompt goes to whichever instance cached it first,
and a judge that sorts the keys of -inf by index lets the plan steer the load at will
(or, with NaN, makes every comparison false so the first instance takes everything while
the judge's load figures, averaged over instances, look idle).
How it wins today: against a judge that takes any float, the plan's routing is whatever
the float's arithmetic makes it, not the weighing the target describes.
Why a sound evaluator must not credit it: the weight is checked to be a finite number in
0..64 on the trusted side, before any simulation.
Sound verdict: not VALID.
"""


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "accelerator": "H100", "tp": 4,
                         "pp": 1, "replicas": 4, "max_num_batched_tokens": 2048,
                         "max_num_seqs": 256, "block_size": 16}],
            "router": {"prefix_weight": float("inf")}}
# EVOLVE-BLOCK-END
