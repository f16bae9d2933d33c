"""Neurosurgeon-style (Kang et al., ASPLOS 2017): per request, the cut that minimises the
predicted latency of the prompt from per-layer profiles: the client's layers at its
device's throughput, the state at the cut in bf16 over the uplink throughput the client
observed, and the server's layers at an H200's profiled prefill rate (33k tokens/s for
the whole model, docs/routing.md); the server queue is not predicted. Decoding continues
split when the cut is above 0."""

SERVER_TOK_S = 33000.0


def split(request):
    p, n = request["prompt_tokens"], request["layers"]
    up = max(request["uplink_bps"], 1.0) / 8.0
    best_k, best_t = 0, None
    for k in range(n):
        state = request["codecs"]["bf16"] if k > 0 else 0.0
        t = (p * k / n / request["prefill_tok_s"]
             + p * (request["text_bytes_per_token"] + state) / up
             + p * (n - k) / n / SERVER_TOK_S)
        if best_t is None or t < best_t:
            best_k, best_t = k, t
    return {"layers": best_k, "codec": "bf16", "decode": "split" if best_k else "server"}
