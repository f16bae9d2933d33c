"""The trusted simulation of split requests: client layers, encode, uplink, server.

For request i with ``k`` of the model's ``L`` layers on its client (device class ``d``),
codec ``c`` and decoding ``where`` ("server" or "split"), prompt ``P`` and output ``O``::

    client_s  = P x (k / L) / (d.prefill_tok_s x webgpu_factor)
    encode_s  = P x hidden x c.encode_us_per_element                 (k > 0)
    upload    = P x text_bytes                                       (always: the prompt)
              + P x c.bits x hidden / 8                              (k > 0: the state at the cut)
              + P x k x 2 x kv_heads x head_dim x c.bits / 8         (k > 0, decode on the server:
                                                                      the client layers' KV)
    at_server = uplink.finish(arrival + client_s + encode_s, upload)   (the trace replayed)

The server (the routing simulator, evaluators/routing/sim.py, with hardware.py's calibrated
step model and its queueing) sees a request arriving at ``at_server`` with
``ceil(P x (L - k) / L)`` prompt tokens: its prefill cost scaled by the layers it computes
(exact for the linear terms; the quadratic attention term is scaled by the square, a few
per cent of a prefill at these lengths), and ``O`` output tokens decoded at full cost (the
server holds every layer's weights and reads them once per step whatever it computes).
TTFT = server first token - arrival + rtt. With ``where = "split"`` every further token
also waits for the client's ``k`` layers (``1 / (d.decode_tok_s x webgpu_factor) x k / L``),
one token's state over the uplink (replayed from when it is ready) and a round trip, added
to the server's own time per token.

Server dollars: the server replicas' busy seconds times their hourly price, per million
tokens served (prompt and output): GPU time used, as if idle time cost nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from evaluators.routing.fleet import Fleet
from evaluators.routing.hardware import ModelShape
from evaluators.routing.sim import SimConfig, simulate
from evaluators.routing.split.tables import Codec, Device, Uplink
from evaluators.routing.workload import Workload


@dataclass(frozen=True)
class Profile:
    """The trusted profile's constants (``[evaluator]`` settings)."""

    model: ModelShape = ModelShape()
    webgpu_factor: float = 0.5  # browser (WebGPU) throughput over native llama.cpp: assumed
    rtt_s: float = 0.06
    text_bytes_per_token: float = 4.0
    observe_s: float = 2.0  # the client's throughput estimate looks back this far


@dataclass(frozen=True)
class Client:
    """Who sends request i: a device class and an uplink entered at ``offset_s``."""

    device: Device
    link: Uplink
    offset_s: float


@dataclass(frozen=True)
class Choice:
    layers: int
    codec: str
    decode: str  # "server" or "split"


SERVER_ONLY = Choice(0, "bf16", "server")


@dataclass
class Outcome:
    ttft_s: np.ndarray
    tpot_s: np.ndarray  # nan for single-token outputs
    server_usd: float
    tokens: float
    upload_bytes: np.ndarray
    at_server_s: np.ndarray
    dropped: int


def upload_bytes(prompt: int, choice: Choice, codec: Codec, prof: Profile) -> float:
    m = prof.model
    b = prompt * prof.text_bytes_per_token
    if choice.layers > 0:
        b += prompt * codec.bytes_per_token(m.hidden)
        if choice.decode == "server":
            kv_elems = choice.layers * 2 * m.kv_heads * m.head_dim
            b += prompt * kv_elems * codec.bits_per_element / 8.0
    return b


def client_s(prompt: int, choice: Choice, client: Client, codec: Codec,
             prof: Profile) -> float:
    if choice.layers == 0:
        return 0.0
    share = choice.layers / prof.model.layers
    compute = prompt * share / (client.device.prefill_tok_s * prof.webgpu_factor)
    return compute + prompt * prof.model.hidden * codec.encode_us_per_element * 1e-6


def server_tokens(prompt: int, layers: int, total: int) -> int:
    return max(1, math.ceil(prompt * (total - layers) / total))


def run(workload: Workload, clients: list[Client], choices: list[Choice],
        codecs: dict[str, Codec], fleet: Fleet, cfg: SimConfig, prof: Profile) -> Outcome:
    """Simulate every request with its choice; see the module docstring for the model."""
    n = len(workload)
    if not (len(clients) == len(choices) == n):
        raise ValueError("one client and one choice per request")
    at = np.empty(n)
    up = np.empty(n)
    sprompt = [0] * n
    for i in range(n):
        ch, cl, co = choices[i], clients[i], codecs[choices[i].codec]
        p = workload.prompt[i]
        up[i] = upload_bytes(p, ch, co, prof)
        start = workload.arrival[i] + client_s(p, ch, cl, co, prof)
        at[i] = cl.link.finish(cl.offset_s + start, up[i]) - cl.offset_s
        sprompt[i] = server_tokens(p, ch.layers, prof.model.layers)
    order = sorted(range(n), key=lambda i: (at[i], i))
    shifted = Workload(
        name=f"{workload.name}@server", arrival=tuple(float(at[i]) for i in order),
        prompt=tuple(sprompt[i] for i in order),
        output=tuple(workload.output[i] for i in order),
        blocks=tuple((i,) for i in order),  # private blocks: no prefix sharing
        session=tuple(workload.session[i] for i in order),
        region=tuple(workload.region[i] for i in order), block_tokens=workload.block_tokens)
    servers = [k for k, r in enumerate(fleet.replicas) if r.tier == "server"]
    res = simulate(shifted, fleet, lambda req, view: servers[req.id % len(servers)],
                   replace(cfg, prefix_cache=False))
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    served = np.ones(n, dtype=bool)
    for pos, i in enumerate(order):
        first[i], finish[i] = res.first_token[pos], res.finish[pos]
        served[i] = not res.dropped[pos]
    arrival = np.asarray(workload.arrival, dtype=float)
    out = np.asarray(workload.output, dtype=float)
    ttft = first - arrival + prof.rtt_s
    tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    for i in range(n):
        ch = choices[i]
        if ch.layers > 0 and ch.decode == "split" and out[i] > 1 and math.isfinite(first[i]):
            tpot[i] = _split_tpot(first[i], float(tpot[i]), int(out[i]), ch, clients[i],
                                  codecs[ch.codec], prof)
    usd = sum(res.busy_s[k] * fleet.replicas[k].usd_per_hour for k in servers) / 3600.0
    tokens = float((np.asarray(workload.prompt, dtype=float) + out)[served].sum())
    return Outcome(ttft, tpot, usd, tokens, up, at, int(n - served.sum()))


def _split_tpot(first: float, server_tpot: float, out: int, ch: Choice, cl: Client,
                codec: Codec, prof: Profile) -> float:
    """Each token after the first: the client's layers, its state up the link (replayed
    from when it is ready), a round trip and the server's own time per token."""
    per_tok = ch.layers / prof.model.layers / (cl.device.decode_tok_s * prof.webgpu_factor)
    nbytes = codec.bytes_per_token(prof.model.hidden)
    t = first
    for _ in range(out - 1):
        ready = t + per_tok
        t = cl.link.finish(cl.offset_s + ready, nbytes) - cl.offset_s + prof.rtt_s + server_tpot
    return (t - first) / (out - 1)


def pct(values: np.ndarray, q: float) -> float:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if v.size else math.nan


__all__ = ["SERVER_ONLY", "Choice", "Client", "Outcome", "Profile", "client_s", "pct", "run",
           "server_tokens", "upload_bytes"]
