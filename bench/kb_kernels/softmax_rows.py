# KernelBench level1/23_Softmax: softmax over dim 1 of a 2-D tensor, rows of any length (online max/sum, then a
# second pass that normalises).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * cols
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < cols, other=float("-inf"))
        new = tl.maximum(m, x)
        alpha = tl.where(new == float("-inf"), 0.0, tl.exp(m - new))  # lanes that have seen nothing yet
        s = s * alpha + tl.where(x == float("-inf"), 0.0, tl.exp(x - new))
        m = new
    top = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - top), 0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + base + offs, mask=mask, other=float("-inf"))
        tl.store(y_ptr + base + offs, tl.exp(x - top) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, y, cols, BLOCK=2048)
        return y
