"""DistServe's placement in kind: prefill and decode on separate H100 instances, each phase
with its own parallelism, half the GPUs each. Prefill at tensor parallelism 4 in two
instances (lower latency per prompt), decode in one instance at tensor parallelism 8 (one
large batch of running sequences reading its KV over eight GPUs' memory bandwidth)."""

MAX_PROMPT = 16384


def plan():
    return {"classes": [{
        "prompt_tokens": [1, MAX_PROMPT],
        "prefill": {"accelerator": "H100", "tp": 4, "pp": 1, "replicas": 2,
                    "max_num_batched_tokens": 2048, "max_num_seqs": 256, "chunk": 2048,
                    "block_size": 16},
        "decode": {"accelerator": "H100", "tp": 8, "pp": 1, "replicas": 1,
                   "max_num_batched_tokens": 2048, "max_num_seqs": 256, "chunk": 2048,
                   "block_size": 16}}]}
