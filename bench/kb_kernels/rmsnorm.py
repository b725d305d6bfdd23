# KernelBench level1/36_RMSNorm_: x / sqrt(mean(x^2 over dim 1) + eps) for (batch, features, *) of any size.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_kernel(x_ptr, y_ptr, feats, inner, eps, BLOCK_F: tl.constexpr, BLOCK_I: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < inner
    base = b * feats * inner
    acc = tl.zeros((BLOCK_I,), tl.float32)
    for start in range(0, feats, BLOCK_F):
        f = start + tl.arange(0, BLOCK_F)
        m = (f[:, None] < feats) & cmask[None, :]
        x = tl.load(x_ptr + base + f[:, None].to(tl.int64) * inner + cols[None, :], mask=m, other=0.0)
        acc += tl.sum(x * x, 0)
    inv = 1.0 / tl.sqrt(acc / feats + eps)
    for start in range(0, feats, BLOCK_F):
        f = start + tl.arange(0, BLOCK_F)
        m = (f[:, None] < feats) & cmask[None, :]
        off = base + f[:, None].to(tl.int64) * inner + cols[None, :]
        x = tl.load(x_ptr + off, mask=m, other=0.0)
        tl.store(y_ptr + off, x * inv[None, :], mask=m)


class ModelNew(nn.Module):
    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        batch, feats = x.shape[0], x.shape[1]
        inner = math.prod(x.shape[2:])
        rms_kernel[(batch, triton.cdiv(inner, 128))](x, y, feats, inner, self.eps, BLOCK_F=16, BLOCK_I=128)
        return y
