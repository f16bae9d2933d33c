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
"""Cheat: unknown_codec. Class: unmeasured input (a codec the table does not hold).

Attack: names a codec of its own, "int1_magic", said to send one bit a value, and splits
every long prompt at 28 layers with it.
How it wins today: a judge that computes bytes from the name (or defaults an unknown
codec's bytes to zero, or its quality to perfect) lets a state of 512 bytes a token cross
a cellular link in a fraction of bf16's time, and the server computes a few layers only.
Why a sound evaluator must not credit it: only codecs measured by the coinfer codec kind,
with their bytes and quality, exist; a name outside the table is refused with the list.
Sound verdict: not VALID.
"""


def split(request):
    if request["prompt_tokens"] >= 256:
        return {"layers": 28, "codec": "int1_magic", "decode": "server"}
    return {"layers": 0, "codec": "bf16", "decode": "server"}
# EVOLVE-BLOCK-END
