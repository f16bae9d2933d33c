"""A fixed split: 70% of the layers (22 of 32) on every client, the state at the cut in
bf16, decoding continued split (the client keeps its layers for every token)."""


def split(request):
    return {"layers": round(0.7 * request["layers"]), "codec": "bf16", "decode": "split"}
