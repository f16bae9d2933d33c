"""Client/server split of a Llama-3-8B-shaped model, decided per request.

``split(request) -> dict`` sees what the client knows when it sends the request: its
prompt length (``prompt_tokens``), its device class (``device``) and that device's
browser throughputs (``prefill_tok_s``, ``decode_tok_s``, whole model), the uplink
throughput it observed over the last seconds (``uplink_bps``), the round trip
(``rtt_s``), the model's shape (``layers``, ``hidden``, ``kv_heads``, ``head_dim``),
``text_bytes_per_token`` and the codec table (``codecs``: name -> bytes per token of the
hidden state at any cut). It returns ``{"layers": k, "codec": name, "decode": where}``:
``k`` layers (0 .. layers - 1) run on the client, the state at the cut crosses the uplink
in ``codec``, and decoding continues ``"split"`` (client layers per token, one state up
per token) or on the ``"server"`` (then the client's layers' KV is uploaded too).
``layers = 0`` is server-only and always legal. The trusted side replays the uplink,
runs the server's queue and measures server dollars per million tokens under the SLO.
"""

# EVOLVE-BLOCK-START
# The seed keeps every request on the server (the status quo). The knobs open a split for
# long prompts from fast devices on fast links.
CLIENT_SHARE = 0.0  # knob: float 0.0..0.9
MIN_PROMPT = 1024  # knob: int 64..16384 log
MIN_UPLINK_MBPS = 4.0  # knob: float 0.5..50.0 log
MIN_PREFILL_TOK_S = 1000.0  # knob: float 20.0..5000.0 log
CODEC = "seed_bits5"  # knob: choices=["bf16", "int8_token", "seed_bits5", "int4_group_outliers"]
DECODE = "server"  # knob: choices=["server", "split"]


def split(request):
    k = int(CLIENT_SHARE * request["layers"])
    if (k <= 0 or request["prompt_tokens"] < MIN_PROMPT
            or request["uplink_bps"] < MIN_UPLINK_MBPS * 1e6
            or request["prefill_tok_s"] < MIN_PREFILL_TOK_S):
        return {"layers": 0, "codec": "bf16", "decode": "server"}
    return {"layers": min(k, request["layers"] - 1), "codec": CODEC, "decode": DECODE}
# EVOLVE-BLOCK-END
