"""SPINN-style (Laskaridis et al., MobiCom 2020): a split with compression of the state at
the cut. The cut minimises the predicted prompt latency as Neurosurgeon's does, with the
smallest codec of the table that passes the default quality budget (5 bits per value with
a scale per token, 2,688 bytes a token at width 4,096) and decoding moved to the server
(the client layers' KV goes up in the same codec); it splits only where the prediction
stays within a 2 s TTFT budget, else the request stays on the server."""

SERVER_TOK_S = 33000.0
CODEC = "seed_bits5"
TTFT_BUDGET_S = 2.0


def split(request):
    p, n = request["prompt_tokens"], request["layers"]
    up = max(request["uplink_bps"], 1.0) / 8.0
    bits = request["codecs"][CODEC] * 8.0 / request["hidden"]
    kv_per_layer = 2 * request["kv_heads"] * request["head_dim"] * bits / 8.0
    best_k, best_t = 0, p * request["text_bytes_per_token"] / up + p / SERVER_TOK_S
    for k in range(1, n):
        t = (p * k / n / request["prefill_tok_s"]
             + p * (request["text_bytes_per_token"] + request["codecs"][CODEC]
                    + k * kv_per_layer) / up
             + p * (n - k) / n / SERVER_TOK_S)
        if t < best_t:
            best_k, best_t = k, t
    if best_k and best_t + request["rtt_s"] > TTFT_BUDGET_S:
        best_k = 0
    return {"layers": best_k, "codec": CODEC if best_k else "bf16", "decode": "server"}
