"""Splitwise-HA: prompts on a DGX-H100 (compute for the prefill), tokens on a DGX-A100 (the
token phase is bound by memory, which costs less on the A100); each machine one instance
at tensor parallelism 8, as in the paper: one prompt machine and one token machine in this
target's 16 GPUs."""

MAX_PROMPT = 16384


def _machine(accelerator, budget):
    return {"accelerator": accelerator, "tp": 8, "pp": 1, "replicas": 1,
            "max_num_batched_tokens": budget, "max_num_seqs": 256, "chunk": budget,
            "block_size": 16}


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "prefill": _machine("H100", 2048),
                         "decode": _machine("A100", 2048)}]}
