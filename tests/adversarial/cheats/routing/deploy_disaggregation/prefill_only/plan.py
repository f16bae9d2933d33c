"""Deployment plan of a Llama-2-70B-shaped model on at most 16 GPUs, H100s or A100s, in
Splitwise's setting (Azure's 2023 code and conversation traffic, served together).

``plan()`` returns plain data, once: request classes by prompt length and, per class,
either one pool of instances that prefill and decode (accelerator, tensor and pipeline
parallelism, how many, each engine's token budget per step, running sequences, prefill
chunk, KV block size), or separate prefill and decode pools, each with its own
accelerator and sharding: a prefill instance hands each request's KV over the target's
link to the least loaded decode instance of its class. The trusted side checks it (heads
and layers divide, memory fits the longest request, the GPU budget holds, the classes
cover every prompt length once), routes each request and measures the highest arrival rate
the fleet serves within the SLO, per dollar an hour (an H100 costs more than an A100).
"""

MAX_PROMPT = 16384  # the target's longest prompt (longer ones are cut to it)
GPU_BUDGET = 16

# EVOLVE-BLOCK-START
"""Cheat: prefill_only. Class: work left undone (a phase with no pool).

Attack: the class has a prefill pool and no decode pool: all 16 GPUs prefill, and the
requests' KV is handed to nobody.
How it wins today: against a simulator that ends a request at its hand-off, or sends it to
another class's instances without counting them, every request is done after its first
token, TBT is empty and capacity per dollar counts only prefills.
Why a sound evaluator must not credit it: separate pools are a pair; the trusted side
requires both a prefill and a decode pool (each with at least one instance) and refuses
the class.
Sound verdict: not VALID.
"""


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT],
                         "prefill": {"accelerator": "H100", "tp": 4, "pp": 1, "replicas": 4,
                                     "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                                     "chunk": 2048, "block_size": 16}}]}
# EVOLVE-BLOCK-END
