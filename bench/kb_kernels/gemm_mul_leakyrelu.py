# KernelBench level2/12_Gemm_Multiply_LeakyReLU: leaky_relu((x @ W^T + b) * multiplier), one fused Triton kernel.
# for any (batch, in, out). The constructor makes the parameters the reference's way (same modules, same order).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_act_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, mult, slope,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None].to(tl.int64) * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :].to(tl.int64) * K + (k + rk)[:, None],  # W is (N, K): read it transposed
                    mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc += tl.dot(x, w)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = acc * mult
    acc = tl.where(acc >= 0, acc, acc * slope)
    tl.store(y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm_act(x, weight, bias, mult, slope):
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    gemm_act_kernel[grid](x, weight, bias, y, M, N, K, mult, slope, BM=64, BN=64, BK=32)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        return gemm_act(x, self.gemm.weight, self.gemm.bias, self.multiplier, self.negative_slope)
