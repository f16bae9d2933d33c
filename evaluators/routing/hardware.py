"""Accelerator profiles and the step-time model of one serving replica.

One engine step runs a batch of ``B`` decoding sequences plus ``C`` prefill tokens of the
request at the head of the queue (chunked prefill). Its duration is a roofline::

    mem_s  = (weight_bytes + K * kv_bytes_per_token) / bandwidth       # decode reads all KV
    comp_s = 2 * params * (B + C) / flops_linear                      # every GEMM token
           + 2 * layers * hidden * C * (2 * c0 + C) / flops_attention   # causal prefill attention
    step_s = launch_s + max(mem_s, comp_s)

where ``K`` is the KV tokens of the running batch and ``c0`` the context the prefill chunk
attends to. Calibration, measured on an NVIDIA H200 (2026-11-29), Llama-3-8B-shaped model,
random bf16 weights, Hugging Face eager + SDPA: prefill 33k tokens/s at 2k tokens, 31k at
8k, 23k at 32k. A least-squares fit of ``T(N) = a N + b N^2`` gives a = 2.86e-5 s/token and
b = 4.54e-10 s/token^2, i.e. 562 TFLOP/s on the GEMMs (0.568 of the 989 TFLOP/s bf16 dense
peak) and 577 TFLOP/s in attention (0.584 of peak). Copy bandwidth measured 4,275 GB/s of
the 4.8 TB/s spec (0.89). Eager decode (61-72 ms per step at every batch size) is Python
overhead and is not used; decode is bytes over bandwidth plus ``launch_s`` = 300 us, an
assumption for a CUDA-graph engine (vLLM/SGLang report a few hundred microseconds of
scheduling and launch per step). Other accelerators take the same efficiencies applied to
their spec-sheet peaks (see docs/routing.md for sources).
"""

from __future__ import annotations

from dataclasses import dataclass

# Efficiencies of the H200 fit, applied to every profile's spec-sheet peaks.
EFF_LINEAR = 0.568
EFF_ATTENTION = 0.584
EFF_MEMORY = 0.89
LAUNCH_S = 300e-6
MEMORY_UTILISATION = 0.90  # share of HBM the engine may use (vLLM's default gpu_memory_utilization)


class ModelSizes:
    """Weight and KV sizes of a decoder, from the fields a model shape declares."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class ModelShape(ModelSizes):
    """The served model; the default is Llama-3-8B (GQA: 8 KV heads of 128)."""

    name: str = "llama-3-8b"
    params: float = 8.03e9
    layers: int = 32
    hidden: int = 4096
    kv_heads: int = 8
    head_dim: int = 128
    dtype_bytes: int = 2


@dataclass(frozen=True)
class Accelerator:
    """Spec-sheet figures of one accelerator and an assumed on-demand price."""

    name: str
    bf16_tflops: float  # dense, no sparsity
    bandwidth_tbs: float
    memory_gb: float
    usd_per_hour: float


# Spec sheets: NVIDIA H200 (989 TFLOP/s dense bf16, 4.8 TB/s, 141 GB), H100 SXM (989,
# 3.35 TB/s, 80 GB), A100 SXM 80GB (312, 2.039 TB/s), L40S (362 dense, 864 GB/s, 48 GB).
# Prices are assumptions for cost comparisons, not quotes; override them in the fleet.
ACCELERATORS: dict[str, Accelerator] = {
    "H200": Accelerator("H200", 989.0, 4.8, 141.0, 3.80),
    "H100": Accelerator("H100", 989.0, 3.35, 80.0, 2.90),
    "A100": Accelerator("A100", 312.0, 2.039, 80.0, 1.80),
    "L40S": Accelerator("L40S", 362.0, 0.864, 48.0, 1.00),
}


@dataclass(frozen=True)
class StepModel:
    """Coefficients of the step-time roofline for one accelerator serving one model."""

    accelerator: str
    launch_s: float
    mem_base_s: float  # weights over bandwidth
    mem_per_kv_token_s: float
    comp_per_token_s: float  # per batched token (decode or prefill)
    attn_coef_s: float  # times C * (2 c0 + C)
    kv_capacity_tokens: int
    usd_per_hour: float

    def step_s(self, decode: float, chunk: float, kv_tokens: float, context: float) -> float:
        mem = self.mem_base_s + kv_tokens * self.mem_per_kv_token_s
        comp = (decode + chunk) * self.comp_per_token_s + self.attn_coef_s * chunk * (
            2.0 * context + chunk
        )
        return self.launch_s + (mem if mem > comp else comp)

    def prefill_s(self, tokens: float) -> float:
        """Time of a lone prefill of ``tokens`` in one chunk (used for SLO scaling, docs)."""
        return self.step_s(0.0, tokens, 0.0, 0.0)


def step_model(
    accelerator: str | Accelerator,
    model: ModelShape | None = None,
    *,
    launch_s: float = LAUNCH_S,
    usd_per_hour: float | None = None,
) -> StepModel:
    """Build the step model of ``accelerator`` (a name from ACCELERATORS or a spec)."""
    model = model or ModelShape()
    if isinstance(accelerator, str):
        if accelerator not in ACCELERATORS:
            raise KeyError(
                f"unknown accelerator {accelerator!r}; known: {', '.join(ACCELERATORS)} "
                "(or pass an Accelerator with spec-sheet figures)"
            )
        accelerator = ACCELERATORS[accelerator]
    bw = accelerator.bandwidth_tbs * 1e12 * EFF_MEMORY
    f_lin = accelerator.bf16_tflops * 1e12 * EFF_LINEAR
    f_attn = accelerator.bf16_tflops * 1e12 * EFF_ATTENTION
    free = accelerator.memory_gb * 1e9 * MEMORY_UTILISATION - model.weight_bytes
    if free <= 0:
        raise ValueError(
            f"{model.name} ({model.weight_bytes / 1e9:.0f} GB) does not fit on "
            f"{accelerator.name} ({accelerator.memory_gb:.0f} GB)"
        )
    return StepModel(
        accelerator=accelerator.name,
        launch_s=launch_s,
        mem_base_s=model.weight_bytes / bw,
        mem_per_kv_token_s=model.kv_bytes_per_token / bw,
        comp_per_token_s=2.0 * model.params / f_lin,
        attn_coef_s=2.0 * model.layers * model.hidden / f_attn,
        kv_capacity_tokens=int(free // model.kv_bytes_per_token),
        usd_per_hour=accelerator.usd_per_hour if usd_per_hour is None else usd_per_hour,
    )
