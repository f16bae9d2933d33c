"""vLLM's default deployment behind a KV-cache-aware router (as llm-d's prefix-cache scorer
beside a load scorer): four TP-4 instances, a 2,048-token budget, and the router counting
each leading block of the prompt an instance has cached as one outstanding request less.
No host tier: the prefix cache is HBM only."""

MAX_PROMPT = 16384


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "accelerator": "H100", "tp": 4,
                         "pp": 1, "replicas": 4, "max_num_batched_tokens": 2048,
                         "max_num_seqs": 256, "block_size": 16}],
            "router": {"prefix_weight": 1.0}}
