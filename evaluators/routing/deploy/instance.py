"""One serving instance of a deployment plan, as the routing simulator sees it.

:class:`InstanceStep` wraps a :class:`~evaluators.routing.deploy.parallel.ParallelStepModel`
with the simulator's step-model interface and the instance's own memory budget. The
parallel model costs about 25 us a call (table interpolation); the simulator calls it once
per segment of constant batch composition, tens of thousands of times a run. Its step time
is, for a fixed batched-token count T = B + C, linear in everything else (sequences,
prompts, KV tokens read, prefill attention pairs), so the part that depends on T only is
memoised per T and the linear coefficients are taken once: the same value, in about 1 us
(tests/evaluators/routing/test_deploy_mode.py compares the two).

Memory per GPU (bytes), an assumption of this module, not a measurement: the weights split
evenly over ``tp x pp`` GPUs; activations of a step of ``token_budget`` tokens, the hidden
states (4 x hidden) and the MLP's gate and up outputs (2 x ffn / tp) in bf16, plus the
logits of one token per sequence in fp32 (vocabulary split over tp); and a fixed
``RESERVED_BYTES`` per GPU for the CUDA context, NCCL buffers and CUDA graphs. What is left
of ``MEMORY_UTILISATION`` x HBM holds the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from evaluators.routing.deploy.parallel import DeployModel, ParallelStepModel, parallel_step_model
from evaluators.routing.hardware import ACCELERATORS, MEMORY_UTILISATION

RESERVED_BYTES = 1.0e9  # CUDA context, NCCL buffers, CUDA graphs: per GPU (assumed)
VOCAB = 32_000  # Llama-2's vocabulary


def activation_bytes(model: DeployModel, token_budget: int, max_seqs: int, tp: int) -> float:
    """Peak activation memory of one step on one GPU (see the module docstring)."""
    hidden = token_budget * (4 * model.hidden + 2 * model.ffn / tp) * model.dtype_bytes
    logits = max_seqs * VOCAB * 4 / tp
    return hidden + logits


def per_gpu_free_bytes(model: DeployModel, accelerator: str, tp: int, pp: int,
                       token_budget: int, max_seqs: int) -> float:
    """Bytes of one GPU left for KV once weights, activations and the reserve are in."""
    usable = ACCELERATORS[accelerator].memory_gb * 1e9 * MEMORY_UTILISATION
    return (usable - model.weight_bytes / (tp * pp) - RESERVED_BYTES
            - activation_bytes(model, token_budget, max_seqs, tp))


@dataclass
class InstanceStep:
    """The simulator's step model for one instance (``accelerator``, ``kv_capacity_tokens``,
    ``usd_per_hour``, ``comp_per_token_s``, ``step_s``, ``prefill_s``)."""

    parallel: ParallelStepModel
    kv_capacity_tokens: int
    _by_tokens: dict[float, float] = field(default_factory=dict, repr=False)
    _coef: tuple[float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0), repr=False)

    def __post_init__(self) -> None:
        b = self.parallel.batch_s
        base = b(1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        # per sequence, per prompt, per KV token read, per attention pair: linear terms
        self._coef = (b(1.0, 0.0, 0.0, 0.0, 1.0, 0.0) - base,
                      b(1.0, 0.0, 0.0, 0.0, 0.0, 1.0) - base,
                      b(1.0, 0.0, 1.0, 0.0, 0.0, 0.0) - base,
                      b(1.0, 0.0, 0.0, 1.0, 0.0, 0.0) - base)

    @property
    def accelerator(self) -> str:
        return self.parallel.accelerator

    @property
    def usd_per_hour(self) -> float:
        return self.parallel.usd_per_hour

    @property
    def gpus(self) -> int:
        return self.parallel.gpus

    @property
    def comp_per_token_s(self) -> float:
        """Prefill seconds per token at 2,048 tokens (the view's relative speed)."""
        return self.prefill_s(2048.0) / 2048.0

    def step_s(self, decode: float, chunk: float, kv_tokens: float, context: float) -> float:
        tokens = decode + chunk
        if tokens <= 0:
            return 0.0
        g = self._by_tokens.get(tokens)
        if g is None:
            g = self._by_tokens[tokens] = self.parallel.batch_s(tokens, 0.0, 0.0, 0.0, 0.0, 0.0)
        prompts = 1.0 if chunk > 0 else 0.0
        per_seq, per_prompt, per_kv, per_pair = self._coef
        return (g + per_seq * (decode + prompts) + per_prompt * prompts + per_kv * kv_tokens
                + per_pair * chunk * (2.0 * context + chunk))

    def prefill_s(self, tokens: float) -> float:
        return self.step_s(0.0, tokens, 0.0, 0.0)


def instance_step(model: DeployModel, accelerator: str, tp: int, pp: int, token_budget: int,
                  max_seqs: int) -> InstanceStep:
    """The step model of one instance, its KV capacity after weights, activations and the
    reserve (raises ValueError when nothing is left)."""
    free = per_gpu_free_bytes(model, accelerator, tp, pp, token_budget, max_seqs)
    if free <= 0:
        raise ValueError(f"{model.name} does not fit on {tp * pp} x {accelerator} with a "
                         f"{token_budget}-token step")
    par = parallel_step_model(accelerator, model, tp=tp, pp=pp, same_node=tp * pp <= 8)
    capacity = int(free * tp * pp // model.kv_bytes_per_token)
    return InstanceStep(replace(par, kv_capacity_tokens=capacity), capacity)
