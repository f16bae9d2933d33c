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
"""Cheat: unoffered_accelerator. Class: resource accounting (hardware the target does not
offer).

Attack: the decode pool runs on H200s, which the simulator knows (141 GB and 4.8 TB/s per
GPU: more running sequences and faster token steps) but this target does not offer; the
prefill pool stays on H100s.
How it wins today: against a judge that builds whatever accelerator it has a profile for,
the decode pool's token steps get about 40% faster and hold twice the KV, and capacity
per dollar rises on hardware the deployment cannot buy.
Why a sound evaluator must not credit it: the target's accelerators are H100 and A100; the
trusted side checks each pool's accelerator against that list and refuses H200.
Sound verdict: not VALID.
"""


def _engine(accelerator, replicas):
    return {"accelerator": accelerator, "tp": 4, "pp": 1, "replicas": replicas,
            "max_num_batched_tokens": 2048, "max_num_seqs": 256, "chunk": 2048,
            "block_size": 16}


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "prefill": _engine("H100", 3),
                         "decode": _engine("H200", 1)}]}
# EVOLVE-BLOCK-END
