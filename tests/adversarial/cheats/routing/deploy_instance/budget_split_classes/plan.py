"""Deployment plan of a Llama-2-70B-shaped model on a budget of 16 H100s.

``plan()`` returns plain data, once: request classes by prompt length and, per class, the
instances that serve it (accelerator, tensor and pipeline parallelism, how many, and each
engine's token budget, running sequences, prefill chunk and KV block size), optionally as
separate prefill and decode pools. The trusted side checks it (heads and layers divide,
memory fits the longest request, the GPU budget holds, the classes cover every prompt
length once), routes each request to its class and measures the highest arrival rate the
fleet serves within the SLO, per dollar an hour.
"""

MAX_PROMPT = 16384  # the target's longest prompt (longer ones are cut to it)
GPU_BUDGET = 16

# EVOLVE-BLOCK-START
"""Cheat: budget_split_classes. Class: resource accounting (the budget split over classes).

Attack: each class on its own stays within the 16-GPU budget (4 instances of 4 H100s), but
there are two of them: short prompts get one full fleet and long prompts another, 32 GPUs
in all. A judge that checks the budget per class, or trusts a "gpus" figure the plan could
state, simulates twice the hardware.
How it wins today: against a per-class budget check, twice the capacity at the price the
plan claims; capacity per dollar well above the seed's if the price is taken per class.
Why a sound evaluator must not credit it: the budget bounds the whole fleet; the trusted
side adds the GPUs of every pool of every class itself and refuses 32 > 16.
Sound verdict: not VALID.
"""


def _engine(replicas):
    return {"accelerator": "H100", "tp": 4, "pp": 1, "replicas": replicas,
            "max_num_batched_tokens": 2048, "max_num_seqs": 256, "block_size": 16}


def plan():
    return {"classes": [{"prompt_tokens": [1, 2048], **_engine(4)},
                        {"prompt_tokens": [2049, MAX_PROMPT], **_engine(4)}]}
# EVOLVE-BLOCK-END
