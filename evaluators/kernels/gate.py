"""The end-to-end gate: a kernel replaces its op inside a Llama-shaped model, decoded by the
trusted engine, before its pull branch is published.

A microbenchmark draws the shapes its workloads name; a model draws others (one row per
decode step, attention rows masked past the cache's length, a vocabulary of its own). The
gate builds a small decoder (:class:`~evaluators.speculative.model.TinyLM` with RMSNorm
norms, or LayerNorm for the LayerNorm target), puts the program's ``ModelNew`` where its op
sits (:data:`SLOTS`), and decodes greedily on :class:`~evaluators.speculative.engine.
StaticDecoder` (CUDA graphs on a GPU, eager on the CPU through the Triton interpreter):

- **required**: every greedy token is the argmax of a float64 run of the same model with
  the trusted op, fed the same tokens (a token within a near-tie of the best is accepted
  and counted), and the step logits (and, for cross-entropy, the step losses) are within
  ``max(the target's norm tolerance, 4 x the error of the trusted op in the same dtype)``
  of that float64 run: the kernel may add no more error than its op's own rounding;
- **measured** (GPU): a decode step and a prefill step, replayed, with the program, the
  seed, the fastest installed production rival (:mod:`evaluators.kernels.rivals`) and
  torch's op.

The trusted side (:func:`judge`) builds the weights, writes them to a file and computes the
float64 references; the program runs in its own process (:func:`run_program`, a sandbox
entry) and sends back its tokens, logits and losses; nothing it says about itself is
believed except its timings, which are measured where it runs and reported, not gated on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from evaluators.speculative.model import Block, LMConfig, TinyLM
from optimizer.sandbox.loader import load_module

# where each target's op sits in the model
SLOTS = {
    "rmsnorm": "norm",  # every norm of a Llama-shaped model (two a block and the final one)
    "layernorm": "norm",  # the same places in a GPT-shaped model
    "softmax": "attention",  # the attention probabilities, masked slots at -inf
    "cross_entropy": "loss",  # the loss of each chosen token (scoring a decode)
    "gemm": "ffn",  # the FFN's up projection with a ReLU: relu(x @ W + b)
}
NORM_KIND = {"layernorm": "layer"}  # every other target's model is RMSNorm (Llama-shaped)
STEP_DTYPE = {"gemm": "float16"}  # on the CPU: bf16 tl.dot is wrong in the interpreter
ERROR_FACTOR = 4.0  # the kernel may add at most this multiple of the trusted op's error
WEIGHTS = "gate-weights.safetensors"
ANSWER = "gate-answer.safetensors"


@dataclass(frozen=True)
class GateShape:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    ffn_mult: int
    max_len: int
    prompt: int
    steps: int
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# CPU: the Triton interpreter runs every launch in numpy (correctness only)
CPU_SHAPE = GateShape(vocab=96, d_model=48, n_layers=2, n_heads=2, ffn_mult=2, max_len=24,
                      prompt=6, steps=8, dtype="float32")
# GPU: Llama-3 8B's width, heads and vocabulary, four blocks
GPU_SHAPE = GateShape(vocab=128256, d_model=4096, n_layers=4, n_heads=32, ffn_mult=4,
                      max_len=1024, prompt=512, steps=32, dtype="bfloat16")


def shape_for(device: str, target: str) -> GateShape:
    if device.startswith("cuda"):
        return GPU_SHAPE
    return GateShape(**{**CPU_SHAPE.to_json(), "dtype": STEP_DTYPE.get(target, "float32")})


# -- the model -----------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """The trusted RMSNorm (the rmsnorm target's reference)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(xf.dtype)).to(x.dtype)


class GateBlock(Block):
    """A pre-norm block whose attention softmax and FFN up projection are replaceable ops
    (``softmax_op(scores [rows, slots])``, ``ffn_op(x [rows, d], W [d, f], b [f])`` =
    ``relu(x @ W + b)``); None: torch's."""

    def __init__(self, d: int, n_heads: int, ffn_mult: int, rms: bool):
        super().__init__(d, n_heads, ffn_mult)
        self.up = nn.Linear(d, ffn_mult * d, bias=True)
        if rms:
            self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)  # type: ignore[assignment]
        self.softmax_op: Callable[..., torch.Tensor] | None = None
        self.ffn_op: Callable[..., torch.Tensor] | None = None
        self.up_t: torch.Tensor | None = None  # W as [d, f], contiguous (the GEMM's B)

    def step(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
             pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        keys.index_copy_(2, pos, k)
        values.index_copy_(2, pos, v)
        if self.softmax_op is None:
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        else:
            scores = (q @ keys.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
            scores = scores.masked_fill(~mask, float("-inf"))
            b, h, t, n = scores.shape
            probs = self.softmax_op(scores.reshape(b * h * t, n).contiguous())
            att = probs.view(b, h, t, n) @ values
        return self._rest(x, att)

    def _rest(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        if self.ffn_op is None:
            up = torch.relu(self.up(h))
        else:
            assert self.up_t is not None
            up = self.ffn_op(h.reshape(b * t, d).contiguous(), self.up_t,
                             self.up.bias).view(b, t, -1)
        return x + self.down(up)


class GateLM(TinyLM):
    """TinyLM with :class:`GateBlock` blocks; RMSNorm norms unless ``rms`` is False."""

    def __init__(self, cfg: LMConfig, rms: bool = True):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(GateBlock(cfg.d_model, cfg.n_heads, cfg.ffn_mult, rms)
                                    for _ in range(cfg.n_layers))
        if rms:
            self.norm = RMSNorm(cfg.d_model)  # type: ignore[assignment]
        self.loss_op: Callable[..., torch.Tensor] | None = None


def build_model(target: str, shape: GateShape, seed: int = 0, device: str = "cpu") -> GateLM:
    """The gate's model with the trusted op in every slot, in float32 on the CPU, weights
    drawn from ``seed`` and spread (unit-gain linears, embeddings of unit variance, norm
    weights 1 +- 0.2) so that greedy decoding is not decided by near-ties."""
    cfg = LMConfig(vocab=shape.vocab, d_model=shape.d_model, n_layers=shape.n_layers,
                   n_heads=shape.n_heads, ffn_mult=shape.ffn_mult, max_len=shape.max_len)
    model = GateLM(cfg, rms=NORM_KIND.get(target) != "layer")
    gen = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or \
                    name == "norm.weight":
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, device=device))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, device=device))
            elif name in ("embed.weight", "pos.weight"):
                p.copy_(torch.randn(p.shape, generator=gen, device=device))
            else:
                p.copy_(torch.randn(p.shape, generator=gen, device=device) / math.sqrt(p.shape[1]))
    return model


def build_on(target: str, shape: GateShape, seed: int, device: str,
             dtype: torch.dtype) -> GateLM:
    """:func:`build_model` made on ``device`` (the same values there from the same seed)
    and cast to ``dtype``."""
    with torch.device(device):
        model = build_model(target, shape, seed, device)
    return model.to(dtype).eval()


def install(model: GateLM, target: str, cls: Callable[..., nn.Module],
            init: list[Any] | None = None) -> GateLM:
    """Put ``cls`` (a ``ModelNew``, a reference ``Model`` or a rival, all with the reference's
    constructor and forward) in the model's slot for ``target``; weights are kept."""
    p = model.embed.weight
    slot = SLOTS[target]
    if slot == "norm":
        def swap(old: nn.Module) -> nn.Module:
            eps = float(getattr(old, "eps", 1e-6))
            new = cls(model.cfg.d_model, eps).to(device=p.device, dtype=p.dtype)
            new.load_state_dict(old.state_dict())
            return new
        for blk in model.blocks:
            assert isinstance(blk, GateBlock)
            blk.norm1, blk.norm2 = swap(blk.norm1), swap(blk.norm2)  # type: ignore[assignment]
        model.norm = swap(model.norm)  # type: ignore[assignment]
        return model
    op = cls(*(init or [])).to(device=p.device, dtype=p.dtype)
    if slot == "loss":
        model.loss_op = op
        return model
    for blk in model.blocks:
        assert isinstance(blk, GateBlock)
        if slot == "attention":
            blk.softmax_op = op
        else:
            blk.ffn_op = op
            blk.up_t = blk.up.weight.detach().t().contiguous()
    return model


def prompt_ids(shape: GateShape, seed: int, device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, shape.vocab, (1, shape.prompt), generator=gen).to(device)


@torch.no_grad()
def decode(model: GateLM, prompt: torch.Tensor, steps: int, force: list[int] | None = None,
           graphs: bool = True) -> tuple[list[int], torch.Tensor, torch.Tensor | None]:
    """Greedy decoding of ``steps`` tokens on the trusted engine (its cached step; CUDA
    graphs on a GPU with ``graphs``), or fed ``force`` instead of each argmax. Returns the
    tokens, each step's logits ``[steps, vocab]`` and, with a loss op, each chosen token's
    loss ``[steps]``."""
    from evaluators.speculative.engine import StaticDecoder

    dec = StaticDecoder(model)
    if graphs:
        dec.capture([1, prompt.shape[1]], features=False)
    cache = dec.new_cache()
    logits, _ = dec(prompt, cache)
    last = logits[0, -1]
    tokens: list[int] = []
    rows, losses = [], []
    for i in range(steps):
        tok = int(last.argmax()) if force is None else int(force[i])
        tokens.append(tok)
        rows.append(last.clone())
        if model.loss_op is not None:
            target = torch.tensor([tok], device=last.device)
            losses.append(model.loss_op(last[None].contiguous(), target).reshape(1))
        if i + 1 < steps:
            logits, _ = dec(torch.tensor([[tok]], device=prompt.device), cache)
            last = logits[0, -1]
    return tokens, torch.stack(rows), torch.cat(losses) if losses else None


@torch.no_grad()
def step_times(model: GateLM, shape: GateShape, reps: int = 50) -> dict[str, float]:
    """The engine's decode step (1 token) and prefill step (the prompt) replayed as CUDA
    graphs, the median of ``reps`` each (ms), and with a loss op the scoring of a prompt
    (the prefill replayed, then the loss of every position, eager); nothing on the CPU."""
    from evaluators.speculative.engine import StaticDecoder

    dec = StaticDecoder(model)
    if not dec.uses_graphs:
        return {}
    dec.capture([1, shape.prompt], features=False)
    dec.calibrate([1, shape.prompt], reps=reps)
    out = {"decode_ms": dec.step_ms[(1, False)],
           "prefill_ms": dec.step_ms[(shape.prompt, False)]}
    if model.loss_op is not None:  # scoring a prompt: the prefill, then every position's loss
        ids = prompt_ids(shape, 0, str(dec.device))
        targets = ids[0, 1:].contiguous()
        times = []
        for i in range(reps + 3):
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            logits, _ = dec(ids, dec.new_cache())
            model.loss_op(logits[0, :-1], targets)
            end.record()
            end.synchronize()
            if i >= 3:
                times.append(begin.elapsed_time(end))
        out["score_ms"] = statistics.median(times)
    return out


# -- the program's side ------------------------------------------------------------------

def op_class(program: str, target: str, reference: Path) -> Callable[..., nn.Module]:
    """The class a program names: a file's ``ModelNew``, ``reference`` (the target's trusted
    ``Model``) or ``rival:<name>`` (:mod:`evaluators.kernels.rivals`)."""
    if program == "reference":
        return load_module(reference, "gate_reference").Model
    if program.startswith("rival:"):
        from evaluators.kernels import rivals

        return rivals.rival_class(target, program.removeprefix("rival:"))
    mod = load_module(Path(program), "gate_program")
    if not hasattr(mod, "ModelNew"):
        raise ValueError(f"{program} defines no ModelNew class")
    return mod.ModelNew


def run_program(payload: dict, io_dir: Path) -> dict:
    """Sandbox entry: decode with ``payload["program"]`` in the slot, write the answer's
    logits (and losses) to ``io_dir/ANSWER`` and return the tokens and, with
    ``payload["time"]``, the step times. Triton runs in its interpreter on the CPU."""
    import os

    device = payload["device"]
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    target, shape = payload["target"], GateShape(**payload["shape"])
    try:
        program = str(payload["program"])
        if program.startswith("io:"):  # a trusted program the trusted side put there
            program = str(io_dir / Path(program[3:]).name)
        cls = op_class(program, target, Path(payload["reference"]))
        model = build_on(target, shape, int(payload["seed"]), device,
                         getattr(torch, shape.dtype))
        install(model, target, cls, payload.get("init"))
        prompt = prompt_ids(shape, int(payload["seed"]), device)
        tokens, logits, losses = decode(model, prompt, shape.steps)
        if device != "cpu":
            torch.cuda.synchronize()
        out = {"logits": logits.contiguous()}
        if losses is not None:
            out["losses"] = losses.contiguous()
        from safetensors.torch import save_file

        save_file({k: v.cpu() for k, v in out.items()}, str(io_dir / ANSWER))
        times = step_times(model, shape, int(payload.get("reps", 50))) \
            if payload.get("time") else {}
    except Exception as exc:  # noqa: BLE001 - a program that fails in the model is a verdict
        return {"error": f"{type(exc).__name__}: {str(exc)[:600]}"}
    return {"tokens": tokens, "times": times}


# -- the trusted side --------------------------------------------------------------------

@dataclass(frozen=True)
class GateVerdict:
    ok: bool
    reason: str
    steps: int = 0
    near_ties: int = 0
    logits_error: float = math.nan
    bound: float = math.nan
    loss_error: float = math.nan

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _norm_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    r = ref.to(torch.float64)
    o = out.to(r.device, torch.float64)
    if not bool(torch.isfinite(o).all()):
        return math.inf
    return float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r).clamp_min(1e-300))


def _loss_error(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor) -> float:
    r = ref.to(torch.float64)
    o = out.to(r.device, torch.float64)
    if not bool(torch.isfinite(o).all()):
        return math.inf
    return float(((o - r).abs() / torch.maximum(r.abs(), scale.to(r))).max())


def reference_runs(target: str, reference: Path, shape: GateShape, seed: int, device: str,
                   tokens: list[int], init: list[Any] | None = None
                   ) -> tuple[tuple[torch.Tensor, torch.Tensor | None],
                              tuple[torch.Tensor, torch.Tensor | None]]:
    """The model with the trusted op fed ``tokens``: in float64, and in the gate's dtype
    (that op's own error, the scale of what a kernel may add)."""
    cls = op_class("reference", target, reference)
    out = []
    for dt in (torch.float64, getattr(torch, shape.dtype)):
        model = install(build_on(target, shape, seed, device, dt), target, cls, init)
        _, logits, losses = decode(model, prompt_ids(shape, seed, device), shape.steps,
                                   force=tokens, graphs=False)
        out.append((logits, losses))
        del model
    return out[0], out[1]


# the last reference runs (their logits only): several programs of a target usually answer
# the same tokens, and the float64 model is the verdict's largest cost
_LAST_REFERENCE: list[Any] = []


def judge(target: str, reference: Path, shape: GateShape, seed: int, device: str,
          tokens: list[int], logits: torch.Tensor, losses: torch.Tensor | None,
          norm_tol: float, init: list[Any] | None = None) -> GateVerdict:
    """The verdict on a program's decode (its ``tokens``, ``logits`` and ``losses``)."""
    if len(tokens) != shape.steps or tuple(logits.shape) != (shape.steps, shape.vocab):
        return GateVerdict(False, f"answered {len(tokens)} tokens and logits of shape "
                           f"{tuple(logits.shape)}, not {shape.steps} and "
                           f"{(shape.steps, shape.vocab)}")
    if any(not 0 <= t < shape.vocab for t in tokens):
        return GateVerdict(False, "a token outside the vocabulary")
    key = (target, str(reference), shape, seed, device, tuple(tokens))
    if _LAST_REFERENCE and _LAST_REFERENCE[0] == key:  # the seed and rivals decode alike
        runs = _LAST_REFERENCE[1]
    else:
        runs = reference_runs(target, reference, shape, seed, device, tokens, init)
        _LAST_REFERENCE[:] = [key, runs]
    (ref, ref_loss), (same, same_loss) = runs
    torch_err = _norm_error(same, ref)
    bound = max(norm_tol, ERROR_FACTOR * torch_err)
    err = _norm_error(logits, ref)
    ties = 0
    for i, tok in enumerate(tokens):
        row = ref[i]
        best = int(row.argmax())
        if tok == best:
            continue
        margin = float(row[best] - row[tok])
        slack = ERROR_FACTOR * float((same[i].to(row) - row).abs().max())
        if margin > slack:
            return GateVerdict(False, f"greedy token {i + 1} of {shape.steps} is {tok}; the "
                               f"float64 model's is {best} (logit margin {margin:.3g}, the "
                               f"trusted op in {shape.dtype} moves logits by at most "
                               f"{slack / ERROR_FACTOR:.3g})", i, ties, err, bound)
        ties += 1
    if not err <= bound:
        return GateVerdict(False, f"logits {err:.3g} from the float64 model (relative norm "
                           f"over {shape.steps} steps), over the bound {bound:.3g} (the "
                           f"target's {norm_tol:g}, or {ERROR_FACTOR:g}x the trusted op's "
                           f"{torch_err:.3g} in {shape.dtype})", shape.steps, ties, err, bound)
    loss_err = math.nan
    if ref_loss is not None:
        if losses is None or tuple(losses.shape) != (shape.steps,):
            return GateVerdict(False, "no loss for every step", shape.steps, ties, err, bound)
        assert same_loss is not None
        # a chosen token's loss is small where the model is sure (lse - x, cancelling): its
        # error is measured against the scale of the logits it was computed from
        scale = ref.abs().amax(-1)
        loss_err = _loss_error(losses, ref_loss, scale)
        loss_bound = max(norm_tol, ERROR_FACTOR * _loss_error(same_loss, ref_loss, scale))
        if not loss_err <= loss_bound:
            return GateVerdict(False, f"losses {loss_err:.3g} from the float64 model's "
                               f"(relative to the logits' largest magnitude), over the bound "
                               f"{loss_bound:.3g}", shape.steps, ties, err, bound, loss_err)
    tie_note = f" ({ties} at a near-tie)" if ties else ""
    return GateVerdict(True, f"greedy tokens identical over {shape.steps} steps{tie_note}, "
                       f"logits {err:.2g} from the float64 model (bound {bound:.2g})",
                       shape.steps, ties, err, bound, loss_err)


def gain_line(times: dict[str, dict[str, float]], program: str = "candidate") -> str:
    """``decode step 1.23 ms: 1.010x the seed, 0.98x liger`` from the step times of
    ``program`` and the others."""
    mine = times.get(program) or {}
    if not mine:
        return "not timed (no GPU)"
    parts = []
    for step in ("decode_ms", "prefill_ms", "score_ms"):
        if step not in mine:
            continue
        rel = [f"{times[o][step] / mine[step]:.3f}x against {o}" for o in times
               if o != program and step in times[o]]
        parts.append(f"{step.removesuffix('_ms')} step {mine[step]:.4g} ms"
                     + (f" ({', '.join(rel)})" if rel else ""))
    return "; ".join(parts)




# -- where the gate runs -------------------------------------------------------------------

def _answer(io_dir: Path) -> tuple[torch.Tensor, torch.Tensor | None] | str:
    """The logits (and losses) a program's process wrote, or why they cannot be read."""
    path = io_dir / ANSWER
    if path.is_symlink() or not path.is_file():
        return "the program's process wrote no answer file"
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the file came from the program's process
        return f"its answer file does not read: {exc}"
    finally:
        path.unlink(missing_ok=True)
    if "logits" not in tensors:
        return "its answer file holds no logits"
    return tensors["logits"], tensors.get("losses")


def payload_for(target: str, device: str, seed: int, program: str, reference: Path,
                time_it: bool, shape: GateShape | None = None, reps: int = 50) -> dict:
    return {"target": target, "shape": (shape or shape_for(device, target)).to_json(),
            "device": device, "seed": seed, "program": program, "reference": str(reference),
            "time": time_it, "reps": reps}


def verdict_of(reply: dict, payload: dict, io_dir: Path, norm_tol: float,
               judge_device: str) -> GateVerdict:
    """The trusted side's verdict on a program's reply (``run_program``'s)."""
    if reply.get("error"):
        return GateVerdict(False, f"failed inside the model: {reply['error']}")
    answer = _answer(io_dir)
    if isinstance(answer, str):
        return GateVerdict(False, answer)
    tokens = reply.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return GateVerdict(False, "its reply holds no token list")
    logits, losses = answer
    return judge(payload["target"], Path(payload["reference"]), GateShape(**payload["shape"]),
                 int(payload["seed"]), judge_device, tokens, logits, losses, norm_tol)


def run_in_process(target_dir: Path, program: str, device: str, seed: int, norm_tol: float,
                   time_it: bool = True, shape: GateShape | None = None,
                   reps: int = 50) -> dict[str, Any]:
    """The gate for one program in this process (the bench's use, on programs a night
    kept): its verdict and, on a GPU, its step times."""
    import tempfile

    target = target_dir.name
    payload = payload_for(target, device, seed, program, target_dir / "reference.py", time_it,
                          shape, reps)
    with tempfile.TemporaryDirectory() as d:
        reply = run_program(payload, Path(d))
        verdict = verdict_of(reply, payload, Path(d), norm_tol, device)
    return {"program": program, "verdict": verdict.to_json(), "times": reply.get("times", {}),
            "shape": payload["shape"]}


def final_gate(name: str, target_dir: Path, cand_dir: Path, ctx: Any, norm_tol: float
               ) -> tuple[bool, str]:
    """The gate before a pull branch (``KernelEvaluator.final_check``): the candidate's
    ``kernel.py`` decodes in its own sandboxed process and the trusted side judges what it
    sent back; on a GPU the seed's program (the target's ``kernel.py``, copied into the
    io folder) is then timed the same way, so the verdict carries the end-to-end gain.
    Returns (passed, what to say in the pull branch's text)."""
    from evaluators._base import result_from_call

    if name not in SLOTS:
        return True, "no end-to-end gate (the op has no place in the gate's model)"
    device = "cuda" if str(ctx.device).startswith("cuda") else "cpu"
    judge_device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    seed = int(ctx.seed) % (1 << 30)
    reference = target_dir / "reference.py"
    shape = shape_for(device, name)
    times: dict[str, dict[str, float]] = {}
    verdict = None
    for who, program in (("candidate", "kernel.py"), ("seed", "io:gate-seed.py")):
        if who == "seed":
            if device != "cuda":
                break
            (ctx.io_dir / "gate-seed.py").write_text((target_dir / "kernel.py").read_text())
        payload = payload_for(name, device, seed, program, reference, device == "cuda", shape)
        payload["target"] = name
        # the device alone: the program's step times, then the float64 runs of the verdict
        with ctx.device_alone():
            call = ctx.run("evaluators.kernels.gate:run_program", payload, workdir=cand_dir)
            failed = result_from_call(call, "final check")
            if failed is None and who == "candidate":
                verdict = verdict_of(call.response, payload, ctx.io_dir, norm_tol,
                                     judge_device)
                if judge_device == "cuda":  # the float64 model's 11 GB back to the slots
                    torch.cuda.empty_cache()
        if failed is not None:
            if who == "candidate":
                return False, f"failed inside the model: {failed.reason[:600]}"
            times["seed"] = {}
            continue
        if who == "candidate":
            assert verdict is not None
            if not verdict.ok:
                return False, verdict.reason
        else:
            (ctx.io_dir / ANSWER).unlink(missing_ok=True)
        times[who] = dict(call.response.get("times") or {})
    assert verdict is not None
    where = (f"{shape.n_layers}-layer width-{shape.d_model} model, "
             f"{'CUDA graphs' if device == 'cuda' else 'Triton interpreter'}")
    return True, f"{verdict.reason} ({where}); {gain_line(times)}"
