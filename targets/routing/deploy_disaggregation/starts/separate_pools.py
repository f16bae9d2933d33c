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
# Separate pools, half the GPUs each: prefill instances hand each request's KV to the
# least loaded decode instance (Splitwise and DistServe's split, at the seed's tensor
# parallelism, H100s on both sides).
PREFILL_ACCELERATOR = "H100"  # knob: choices=["H100", "A100"]
PREFILL_TP = 4  # knob: choices=[4, 8]
PREFILL_REPLICAS = 2  # knob: int 1..4
PREFILL_BUDGET = 4096  # knob: int 512..8192 step 512
# the decode pool; DECODE_REPLICAS = 0: as many instances as the GPUs left hold
DECODE_ACCELERATOR = "H100"  # knob: choices=["H100", "A100"]
DECODE_TP = 4  # knob: choices=[4, 8]
DECODE_PP = 1  # knob: choices=[1, 2]
DECODE_REPLICAS = 0  # knob: int 0..4
DECODE_MAX_SEQS = 256  # knob: choices=[32, 64, 128, 256, 512]


def _engine(accelerator, tp, pp, replicas, budget, max_seqs):
    return {"accelerator": accelerator, "tp": tp, "pp": pp, "replicas": replicas,
            "max_num_batched_tokens": budget, "max_num_seqs": min(max_seqs, budget),
            "chunk": budget, "block_size": 16}


def plan():
    left = GPU_BUDGET - PREFILL_TP * PREFILL_REPLICAS
    decode = DECODE_REPLICAS or max(1, left // (DECODE_TP * DECODE_PP))
    return {"classes": [{
        "prompt_tokens": [1, MAX_PROMPT],
        "prefill": _engine(PREFILL_ACCELERATOR, PREFILL_TP, 1, PREFILL_REPLICAS,
                           PREFILL_BUDGET, 256),
        "decode": _engine(DECODE_ACCELERATOR, DECODE_TP, DECODE_PP, decode, 2048,
                          DECODE_MAX_SEQS)}]}
# EVOLVE-BLOCK-END
