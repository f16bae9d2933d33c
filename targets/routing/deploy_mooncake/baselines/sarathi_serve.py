"""Sarathi-Serve's stall-free batching: the vLLM default deployment with a 512-token budget
per step, so prefill chunks never stretch a decode step much (the paper's setting for
tight time-between-tokens SLOs)."""

MAX_PROMPT = 16384


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "accelerator": "H100", "tp": 4,
                         "pp": 1, "replicas": 4, "max_num_batched_tokens": 512,
                         "max_num_seqs": 256, "block_size": 16}]}
