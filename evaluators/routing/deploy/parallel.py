"""Step time of one serving instance spread over ``tp`` x ``pp`` GPUs, from measured profiles.

One engine step of a micro-batch runs, on each of the ``pp`` pipeline stages, the stage's
``layers / pp`` decoder layers on ``tp`` GPUs. Per layer (seconds on one GPU):

    mlp    = Vidur's measured non-attention operators at T tokens and degree tp (tables.py)
    comm   = 2 all-reduces of T x hidden x 2 bytes over tp GPUs (measured NCCL times)
    attn   = attn_coef * C (2 c0 + C) / tp
    kv     = K x kv_bytes_per_layer / (min(tp, kv_heads) x bw)

with T = B + C the batched tokens (B decoding sequences, C prefill tokens attending to c0
tokens of context), K the KV tokens the decoding sequences read; both attention terms are
the existing calibrated model (hardware.py: the H200 fit's efficiencies on the spec
sheets), split over tp. The KV read is not fitted (``kv_read_s`` says why). A stage's time is

    stage = n_layers x (per_layer + (tp - 1) x per_layer_rank)
          + (seqs x per_seq + prompts x per_prompt) x n_layers / L
          + k_mlp x mlp + k_comm x comm + k_attn x attn + kv
          + n_layers x max(0, T - 2048) x (tp - 1) x per_big_token_rank

where the overheads (per layer, per extra rank and per sequence) and the three factors are
fitted per GPU to Splitwise's
measured Llama-2-70B prompt and token times (calibration.py; stored in tables.json). With
``pp`` stages and ``m`` micro-batches the step's makespan is ``(m + pp - 1)`` stage times
of one micro-batch plus ``pp - 1`` send/recv hops of its activations (measured), i.e. a
bubble of ``(pp - 1) / (m + pp - 1)``. A KV tier below HBM (host memory, say) is a capacity
and a bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluators.routing.deploy import tables as tb
from evaluators.routing.hardware import (
    ACCELERATORS,
    EFF_ATTENTION,
    EFF_MEMORY,
    MEMORY_UTILISATION,
    Accelerator,
    ModelSizes,
)


@dataclass(frozen=True)
class DeployModel(ModelSizes):
    """A Llama-style decoder (gated MLP, grouped-query attention)."""

    name: str
    params: float
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int = 128
    dtype_bytes: int = 2

    @property
    def layer_gemm_params(self) -> float:
        """Weights of one layer's projections: QKV, output, gate + up, down."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return h * (h + 2 * kv) + h * h + 3 * h * self.ffn


# Llama-2-70B (Hugging Face config: 80 layers, hidden 8,192, MLP 28,672, 64 heads, 8 KV
# heads; 68.98 B parameters) and Llama-3-8B (32 layers, 4,096, 14,336, 32 heads, 8 KV heads).
LLAMA2_70B = DeployModel("llama-2-70b", 68.98e9, 80, 8192, 28672, 64, 8)
LLAMA3_8B = DeployModel("llama-3-8b", 8.03e9, 32, 4096, 14336, 32, 8)


@dataclass(frozen=True)
class KVTier:
    """A KV store below HBM (host DRAM, local SSD): how much it holds and how fast it reads."""

    name: str
    capacity_gb: float
    bandwidth_gb_s: float

    def capacity_tokens(self, kv_bytes_per_token: float) -> int:
        return int(self.capacity_gb * 1e9 // kv_bytes_per_token)

    def transfer_s(self, tokens: float, kv_bytes_per_token: float) -> float:
        """Time to move ``tokens`` of KV between this tier and HBM."""
        return tokens * kv_bytes_per_token / (self.bandwidth_gb_s * 1e9)


FEATURES = (
    "per_layer_s",
    "per_layer_rank_s",
    "per_seq_s",
    "k_mlp",
    "k_comm",
    "k_attn",
    "per_big_token_rank_s",
    "per_prompt_s",
)
# Splitwise's prompt times per token rise above about 2,048 tokens a step, more the more
# ranks (+0% at TP 2, +25% at TP 4, +100% at TP 8 on the H100); Vidur's operator and
# collective tables do not show it, so it is a fitted term of its own.
KNEE_TOKENS = 2048


@dataclass(frozen=True)
class Calibration:
    """Constants fitted to Splitwise's measurements (see calibration.py).

    per_layer_s: engine overhead per layer and step (kernel launches, framework);
    per_layer_rank_s: more of it per layer for each rank beyond the first (the all-reduces
    wait for the slowest rank); per_seq_s: cost per sequence in the step (spread over the
    layers); k_mlp, k_comm, k_attn: factors on the measured operator and all-reduce times
    and on the calibrated attention term.
    """

    per_layer_s: float
    per_layer_rank_s: float
    per_seq_s: float
    k_mlp: float
    k_comm: float
    k_attn: float
    per_big_token_rank_s: float
    per_prompt_s: float

    @classmethod
    def of(cls, profile: str) -> Calibration:
        c = tb.calibration(profile)
        return cls(*(float(c[name]) for name in FEATURES))

    def as_tuple(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in FEATURES)


@dataclass(frozen=True)
class ParallelStepModel:
    """Step model of one (accelerator, model, tp, pp) instance; the simulator's interface."""

    accelerator: str
    model: DeployModel
    tp: int
    pp: int
    micro_batches: int
    kv_capacity_tokens: int
    usd_per_hour: float
    spec: Accelerator = field(repr=False)
    calibration: Calibration = field(repr=False)
    kv_tier: KVTier | None = None
    same_node: bool = True  # pipeline stages on one node (NVLink) or across nodes

    @property
    def profile(self) -> str:
        return tb.profile_of(self.accelerator)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def bubble(self) -> float:
        """Share of a step the pipeline's stages sit idle filling and draining."""
        return (self.pp - 1) / (self.micro_batches + self.pp - 1)

    def _mlp_scale(self) -> float:
        s = tb.mlp_profile_shape(self.profile)
        h, kv = s["n_embd"], s["n_kv_head"] * (s["n_embd"] // s["n_head"])
        profiled = h * (h + 2 * kv) + h * h + 3 * h * s["n_expanded_embd"]
        return self.model.layer_gemm_params / profiled

    def features(
        self,
        tokens: float,
        seqs: float,
        attn_pairs: float,
        layers: float,
        prompts: float = 0.0,
    ) -> tuple[float, ...]:
        """Uncalibrated terms of ``layers`` layers, in the order of ``FEATURES``.

        ``seqs`` is the number of sequences in the step, ``prompts`` how many of them
        prefill, ``attn_pairs`` the sum over prefill chunks of C (2 c0 + C). Decode's KV
        read is not among them (:meth:`kv_read_s`).
        """
        m, tp, acc = self.model, self.tp, self.spec
        share = layers / m.layers
        mlp_layer = tb.mlp_layer_ms(self.profile, tokens, tp) * 1e-3 * self._mlp_scale()
        emb_scale = m.hidden / tb.mlp_profile_shape(self.profile)["n_embd"]
        emb = tb.emb_ms(self.profile, tokens) * 1e-3 * emb_scale * share if tokens > 0 else 0.0
        act_bytes = tokens * m.hidden * m.dtype_bytes
        # the bandwidth part of the two all-reduces (their latency is in the overheads)
        comm_layer = 2.0 * tb.all_reduce_bw_ms(self.profile, act_bytes, tp) * 1e-3
        f_attn = acc.bf16_tflops * 1e12 * EFF_ATTENTION
        attn_layer = 2.0 * m.hidden * attn_pairs / (f_attn * tp)
        return (
            layers,
            layers * (tp - 1),
            seqs * share,
            layers * mlp_layer + emb,
            layers * comm_layer,
            layers * attn_layer,
            layers * max(0.0, tokens - KNEE_TOKENS) * (tp - 1),
            prompts * share,
        )

    def kv_read_s(self, kv_tokens: float, layers: float) -> float:
        """Decode attention's reads of ``kv_tokens`` of KV over ``layers`` layers, at the
        memory roofline (hardware.py's measured efficiency), the KV heads split over tp.
        Not fitted: Splitwise's token times barely move with the context (H100 TP 4, batch
        1: 29.4 ms at 128 tokens, 29.6 at 8,192), so they cannot tell this term's factor;
        a factor fitted together with prefill attention's came out 7.8 on the H100 and 0.35
        on the A100, which made an H100 read long contexts slower than an A100."""
        m = self.model
        bw = self.spec.bandwidth_tbs * 1e12 * EFF_MEMORY
        return layers * kv_tokens * (m.kv_bytes_per_token / m.layers) / (
            bw * min(self.tp, m.kv_heads))

    def stage_s(
        self, tokens: float, seqs: float, kv_tokens: float, attn_pairs: float, prompts: float
    ) -> float:
        """Calibrated time of one stage's layers for one micro-batch."""
        layers = self.model.layers / self.pp
        f = self.features(tokens, seqs, attn_pairs, layers, prompts)
        return (sum(c * x for c, x in zip(self.calibration.as_tuple(), f, strict=True))
                + self.kv_read_s(kv_tokens, layers))

    def hop_s(self, tokens: float) -> float:
        """Send/recv of a micro-batch's activations between two stages (measured)."""
        nbytes = tokens * self.model.hidden * self.model.dtype_bytes
        return tb.send_recv_ms(self.profile, nbytes, same_node=self.same_node) * 1e-3

    def batch_s(
        self,
        decode: float,
        chunk: float,
        kv_tokens: float,
        attn_pairs: float,
        seqs: float,
        prompts: float,
    ) -> float:
        """Makespan of one step: the batch split into micro-batches through the pipeline."""
        if decode + chunk <= 0:
            return 0.0
        m = self.micro_batches if self.pp > 1 else 1
        tokens = (decode + chunk) / m
        stage = self.stage_s(tokens, seqs / m, kv_tokens / m, attn_pairs / m, prompts / m)
        hops = (self.pp - 1) * self.hop_s(tokens)
        return (m + self.pp - 1) * stage + hops

    # The simulator's StepModel interface.
    def step_s(self, decode: float, chunk: float, kv_tokens: float, context: float) -> float:
        prompts = 1.0 if chunk > 0 else 0.0
        pairs = chunk * (2.0 * context + chunk)
        return self.batch_s(decode, chunk, kv_tokens, pairs, decode + prompts, prompts)

    def prefill_s(self, tokens: float) -> float:
        """Time of a lone prefill of ``tokens`` in one chunk."""
        return self.step_s(0.0, tokens, 0.0, 0.0)

    def tier_capacity_tokens(self) -> int:
        """KV tokens the tier below HBM holds (0 without one)."""
        if self.kv_tier is None:
            return 0
        return self.kv_tier.capacity_tokens(self.model.kv_bytes_per_token)

    def tier_fetch_s(self, tokens: float) -> float:
        """Time to bring ``tokens`` of KV up from the tier below HBM."""
        if self.kv_tier is None:
            raise ValueError("this instance has no KV tier below HBM")
        return self.kv_tier.transfer_s(tokens, self.model.kv_bytes_per_token)


def parallel_step_model(
    accelerator: str,
    model: DeployModel = LLAMA2_70B,
    *,
    tp: int = 1,
    pp: int = 1,
    micro_batches: int | None = None,
    kv_tier: KVTier | None = None,
    same_node: bool = True,
    usd_per_hour: float | None = None,
    calibration: Calibration | None = None,
) -> ParallelStepModel:
    """Build the step model of ``model`` on ``tp`` x ``pp`` GPUs of ``accelerator``."""
    if tp < 1 or pp < 1:
        raise ValueError(f"tp and pp must be >= 1, got tp={tp} pp={pp}")
    if model.layers % pp:
        raise ValueError(f"{model.layers} layers do not split into {pp} stages")
    profile = tb.profile_of(accelerator)
    spec = ACCELERATORS[accelerator]
    gpus = tp * pp
    free = gpus * spec.memory_gb * 1e9 * MEMORY_UTILISATION - model.weight_bytes
    if free <= 0:
        raise ValueError(
            f"{model.name} ({model.weight_bytes / 1e9:.0f} GB) does not fit on {gpus} x "
            f"{accelerator} ({spec.memory_gb:.0f} GB each)"
        )
    return ParallelStepModel(
        accelerator=accelerator,
        model=model,
        tp=tp,
        pp=pp,
        micro_batches=pp if micro_batches is None else micro_batches,
        kv_capacity_tokens=int(free // model.kv_bytes_per_token),
        usd_per_hour=gpus * spec.usd_per_hour if usd_per_hour is None else usd_per_hour,
        spec=spec,
        calibration=calibration or Calibration.of(profile),
        kv_tier=kv_tier,
        same_node=same_node,
    )
