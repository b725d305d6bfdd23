"""How far an honest tf32 kernel lands from fp64 on KernelBench level 2 #93, a problem ill-conditioned for it.

#93 is `gelu(min(conv_transpose2d(x) + 0.5, 0)) * 2` on `x = rand(...)`: all but a few millionths of its
output elements are exactly 0, so the output's norm is tiny and a tf32 product's error is large next to
it. Prints, at the problem's own channels and spatial sizes and a smaller batch, the normwise relative
error against an fp64 evaluation of: the fp32 reference as written; the conv's operands cut to tf32
toward zero (precision.tf32: what `tl.dot` reads of float32 data on a GPU); rounded to nearest tf32
(cuDNN's TF32 path); and three wrong kernels: operands rounded or cut to bf16, the conv's bias dropped.
What tolerance.py's ILL_MARGIN and CEILING rest on (its table: batches 2-128, weights scaled as the
replay's second weights are).

    python bench/tf32_illconditioned.py [--batch 2] [--seed 0] [--scale 1.0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from distill.verifier.precision import tf32  # noqa: E402 - after the path is set


def _tail(y: torch.Tensor) -> torch.Tensor:
    y = torch.min(y + 0.5, torch.tensor(0.0, dtype=y.dtype))
    return torch.nn.functional.gelu(y) * 2.0


def _cut_bf16(t: torch.Tensor) -> torch.Tensor:
    """float32 with its mantissa cut toward zero to bf16's 7 bits."""
    return (t.view(torch.int32) & ~0xFFFF).view(torch.float32)


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 with its mantissa rounded (not cut) to tf32's 10 bits."""
    return ((t.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2, help="batch size (the problem's own: 128)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    ap.add_argument("--scale", type=float, default=1.0, help="the weights scaled by this (the replay's: 0.67-1.33)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    conv = torch.nn.ConvTranspose2d(64, 128, 4, stride=2)  # its default init, as KernelBench's Model
    x = torch.rand(args.batch, 64, 64, 64)
    w, b = conv.weight.detach() * args.scale, conv.bias.detach() * args.scale
    ct = torch.nn.functional.conv_transpose2d
    with torch.no_grad():
        pre = ct(x.double(), w.double(), b.double(), stride=2)
        exact = _tail(pre)
        rows = {"fp32 as written": _tail(ct(x, w, b, stride=2)),
                "tf32 cut (tl.dot)": _tail(ct(tf32(x), tf32(w), b, stride=2)),
                "tf32 rounded": _tail(ct(_round_tf32(x), _round_tf32(w), b, stride=2)),
                "wrong: bf16 rounded": _tail(ct(x.bfloat16().float(), w.bfloat16().float(), b, stride=2)),
                "wrong: bf16 cut": _tail(ct(_cut_bf16(x), _cut_bf16(w), b, stride=2)),
                "wrong: bias dropped": _tail(ct(x, w, None, stride=2))}
    print(f"batch {args.batch}, seed {args.seed}, weights x{args.scale:g}: {float((pre + 0.5 < 0).double().mean()):.2e} of the outputs "
          f"nonzero, output rms {float(exact.pow(2).mean().sqrt()):.3g}\n")
    print("| evaluation | normwise error vs fp64 |\n|---|---:|")
    for name, out in rows.items():
        err = (out.double() - exact).norm() / exact.norm() if exact.norm() > 0 else float("nan")
        print(f"| {name} | {float(err):.3g} |")


if __name__ == "__main__":
    main()
