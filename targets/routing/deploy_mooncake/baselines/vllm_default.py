"""vLLM's default deployment: the smallest tensor parallelism that holds Llama-2-70B and one
longest request on an H100 (TP 4), as many instances as 16 GPUs hold, one class, chunked
prefill with a 2,048-token budget per step (vLLM's default max_num_batched_tokens for
online serving), 256 sequences, 16-token KV blocks."""

MAX_PROMPT = 16384


def plan():
    return {"classes": [{"prompt_tokens": [1, MAX_PROMPT], "accelerator": "H100", "tp": 4,
                         "pp": 1, "replicas": 4, "max_num_batched_tokens": 2048,
                         "max_num_seqs": 256, "block_size": 16}]}
