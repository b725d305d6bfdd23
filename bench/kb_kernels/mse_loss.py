# KernelBench level1/94_MSELoss: mean((p - t)^2) over any number of elements: per-block partial sums, then one
# program adds them up (a fixed order: deterministic).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_kernel(p_ptr, t_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(part_ptr + pid, tl.sum(d * d, 0))


@triton.jit
def finish_kernel(part_ptr, out_ptr, parts, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, parts, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + offs, mask=offs < parts, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        n = p.numel()
        parts = triton.cdiv(n, 8192)
        part = torch.empty(parts, device=p.device, dtype=torch.float32)
        out = torch.empty((), device=p.device, dtype=p.dtype)
        partial_kernel[(parts,)](p, t, part, n, BLOCK=8192)
        finish_kernel[(1,)](part, out, parts, n, BLOCK=1024)
        return out
