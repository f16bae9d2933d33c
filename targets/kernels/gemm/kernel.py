"""relu(A @ B + bias) in Triton: tiled GEMM, fp32 accumulator, bias and ReLU in the epilogue."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_M = 128  # knob: choices=[64, 128, 256]
BLOCK_N = 128  # knob: choices=[64, 128, 256]
BLOCK_K = 64  # knob: choices=[32, 64, 128]
GROUP_M = 8  # knob: choices=[1, 4, 8, 16]
NUM_WARPS = 8  # knob: choices=[4, 8]
NUM_STAGES = 3  # knob: choices=[2, 3, 4, 5]


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                 s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    # grouped order: GROUP row-blocks share B tiles in L2
    width = GROUP * n_n
    group = pid // width
    first_m = group * GROUP
    size_m = tl.minimum(n_m - first_m, GROUP)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
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


def gemm_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _gemm_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                       b.stride(1), c.stride(0), c.stride(1), BM=BLOCK_M, BN=BLOCK_N,
                       BK=BLOCK_K, GROUP=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return gemm_bias_relu(a, b, bias)
