"""Splitwise-HH: the prompt phase and the token phase on separate machines, both DGX-H100
(one machine is one instance at tensor parallelism 8, as in the paper); at this target's 16
GPUs that is one prompt machine and one token machine. Splitwise's own batching: prompts
batched up to 2,048 tokens a step on the prompt machine, tokens of up to 256 sequences on
the token machine."""

MAX_PROMPT = 16384


def _machine(accelerator, budget):
    return {"accelerator": accelerator, "tp": 8, "pp": 1, "replicas": 1,
            "max_num_batched_tokens": budget, "max_num_seqs": 256, "chunk": budget,
            "block_size": 16}


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "prefill": _machine("H100", 2048),
                         "decode": _machine("H100", 2048)}]}
