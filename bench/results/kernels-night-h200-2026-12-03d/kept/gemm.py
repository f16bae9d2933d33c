"""relu(A @ B + bias) in Triton: tiles chosen per shape bucket, and 16-byte alignment proven
to the compiler when the shape has it.

Triton specialises an integer argument on "divisible by 16". A ragged shape (3000 x 5000 x
1000) has none, so the seed's loads cannot be proven aligned and the copies into shared
memory go element by element: on an NVIDIA H200 (2026-12-02) the seed's 3000x5000x1000 took
0.25 ms against 0.09 ms for torch.compile. Here, when K, N and the row strides are multiples
of 8 elements (16 bytes of bf16), the kernel receives them divided by 8 and multiplies them
back, so their divisibility is known. Shapes with K of at least DEEP_K use the deep bucket's
tiles, the others the shallow bucket's.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
DEEP_K = 2048  # knob: choices=[1024, 2048, 4096]
DEEP_BLOCK_M = 128  # knob: choices=[128, 256]
DEEP_BLOCK_N = 256  # knob: choices=[128, 256]
DEEP_BLOCK_K = 64  # knob: choices=[64, 128]
DEEP_STAGES = 4  # knob: choices=[3, 4]
SHALLOW_BLOCK_M = 128  # knob: choices=[64, 128]
SHALLOW_BLOCK_N = 256  # knob: choices=[64, 128, 256]
SHALLOW_BLOCK_K = 64  # knob: choices=[32, 64]
SHALLOW_STAGES = 3  # knob: choices=[3, 4, 5]
SHALLOW_WARPS = 8  # knob: choices=[4, 8]
GROUP_M = 4  # knob: choices=[4, 8, 16]


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, n_div, k_div, s_am_div, s_bk_div,
                 s_cm_div, s_ak, s_bn, s_cn,
                 ALIGN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP: tl.constexpr):
    # N, K and the row strides arrive divided by ALIGN: multiplied back here, the compiler
    # knows they are multiples of ALIGN
    N = n_div * ALIGN
    K = k_div * ALIGN
    s_am = s_am_div * ALIGN
    s_bk = s_bk_div * ALIGN
    s_cm = s_cm_div * ALIGN
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    width = GROUP * n_n
    group = pid // width
    first_m = group * GROUP
    size_m = tl.minimum(n_m - first_m, GROUP)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = tl.max_contiguous(tl.multiple_of(pid_n * BN + tl.arange(0, BN), BN), BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    c = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, c.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _align(*values: int) -> int:
    """8 when every value is a multiple of 8 elements, else 1."""
    return 8 if all(v % 8 == 0 for v in values) else 1


def gemm_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if K >= DEEP_K:
        bm, bn, bk, stages, warps = DEEP_BLOCK_M, DEEP_BLOCK_N, DEEP_BLOCK_K, DEEP_STAGES, 8
    else:
        bm, bn, bk = SHALLOW_BLOCK_M, SHALLOW_BLOCK_N, SHALLOW_BLOCK_K
        stages, warps = SHALLOW_STAGES, SHALLOW_WARPS
    unit = a.stride(1) == 1 and b.stride(1) == 1 and c.stride(1) == 1
    align = _align(N, K, a.stride(0), b.stride(0), c.stride(0)) if unit else 1
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _gemm_kernel[grid](a, b, bias, c, M, N // align, K // align, a.stride(0) // align,
                       b.stride(0) // align, c.stride(0) // align, a.stride(1), b.stride(1),
                       c.stride(1), ALIGN=align, BM=bm, BN=bn, BK=bk, GROUP=GROUP_M,
                       num_warps=warps, num_stages=stages)
    return c
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return gemm_bias_relu(a, b, bias)
