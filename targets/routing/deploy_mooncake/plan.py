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
# The seed is vLLM's default deployment: the smallest tensor parallelism that holds the
# model and one longest request (TP 2 leaves about 10k tokens of KV: too few), as many
# instances as the budget holds, one class, a 2,048-token budget per step.
SPLIT = 16384  # knob: choices=[1024, 2048, 4096, 8192, 16384]
TP = 4  # knob: choices=[2, 4, 8]
PP = 1  # knob: choices=[1, 2]
# REPLICAS = 0: as many instances as the GPUs the long class leaves hold
REPLICAS = 0  # knob: int 0..8
BUDGET = 2048  # knob: int 512..8192 step 256
MAX_SEQS = 256  # knob: choices=[32, 64, 128, 256, 512]
BLOCK = 16  # knob: choices=[8, 16, 32]
# the class of prompts longer than SPLIT (none while SPLIT = MAX_PROMPT)
LONG_TP = 8  # knob: choices=[4, 8]
LONG_REPLICAS = 1  # knob: int 1..4
LONG_BUDGET = 4096  # knob: choices=[512, 1024, 2048, 4096, 8192]
# prefix reuse: the router's weight of a cached block, and host memory for the prefix
# cache per GPU of an instance (GiB; the target offers up to 128)
PREFIX_WEIGHT = 0.0  # knob: choices=[0.0, 0.1, 0.3, 1.0, 3.0, 10.0]
HOST_GIB_PER_GPU = 0  # knob: int 0..128 step 16


def _engine(tp, pp, replicas, budget, max_seqs, block):
    return {"accelerator": "H100", "tp": tp, "pp": pp, "replicas": replicas,
            "max_num_batched_tokens": budget, "max_num_seqs": min(max_seqs, budget),
            "chunk": budget, "block_size": block,
            "kv_host_gib": HOST_GIB_PER_GPU * tp * pp}


def plan():
    long_gpus = LONG_TP * LONG_REPLICAS if SPLIT < MAX_PROMPT else 0
    replicas = REPLICAS or max(1, (GPU_BUDGET - long_gpus) // (TP * PP))
    classes = [{"prompt_tokens": [1, SPLIT], **_engine(TP, PP, replicas, BUDGET, MAX_SEQS,
                                                       BLOCK)}]
    if SPLIT < MAX_PROMPT:
        classes.append({"prompt_tokens": [SPLIT + 1, MAX_PROMPT],
                        **_engine(LONG_TP, 1, LONG_REPLICAS, LONG_BUDGET, MAX_SEQS, BLOCK)})
    return {"classes": classes, "router": {"prefix_weight": PREFIX_WEIGHT}}
# EVOLVE-BLOCK-END
