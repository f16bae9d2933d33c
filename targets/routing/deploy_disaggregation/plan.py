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
# The seed is vLLM's default deployment: the smallest tensor parallelism that holds the
# model and one longest request on an H100 (tensor parallelism 2 cannot: 4 at least), as
# many instances as the budget holds, one class, a 2,048-token budget per step, prefill and
# decode on the same instances. (starts/separate_pools.py starts from separate pools.)
ACCELERATOR = "H100"  # knob: choices=["H100", "A100"]
TP = 4  # knob: choices=[4, 8]
# REPLICAS = 0: as many instances as the budget holds
REPLICAS = 0  # knob: int 0..4
BUDGET = 2048  # knob: int 256..8192 step 256
MAX_SEQS = 256  # knob: choices=[32, 64, 128, 256, 512]


def plan():
    replicas = REPLICAS or max(1, GPU_BUDGET // TP)
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "accelerator": ACCELERATOR,
                         "tp": TP, "pp": 1, "replicas": replicas,
                         "max_num_batched_tokens": BUDGET,
                         "max_num_seqs": min(MAX_SEQS, BUDGET), "chunk": BUDGET,
                         "block_size": 16}]}
# EVOLVE-BLOCK-END
