"""Error of low-precision kernels against an fp64 reference: what the verifier's bf16/fp16 tolerances rest on.

For representative ops (long sums, a matmul, softmax, layernorm) on bf16 or fp16 inputs, it prints
the normwise relative error ||out - exact|| / ||exact|| and the worst element's error in units of
the output's RMS, against the exact (fp64) result on the same rounded inputs, of:

- `fp32acc`: a correct kernel: upcast, compute and accumulate in fp32, round the output once;
- `eager`: PyTorch eager in the dtype (what the verifier's reference runs);
- `fp32acc~eager`: the two against each other (what the verifier compares);
- `lowacc`: a kernel that accumulates in the low dtype: 64 lanes, each adding its share of the
  reduction into a bf16/fp16 accumulator one element at a time, then summed; matmul adds each
  K-tile's fp32 partial product into a low-precision accumulator (tiles of 32).

    python bench/lowprec_error.py [--dtype bf16|fp16] [--device cpu|cuda] [--n 4096] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LANES, TILE_K = 64, 32


def err(out: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    d = out.double() - exact
    rms = float(exact.norm()) / math.sqrt(exact.numel())
    return float(d.norm() / exact.norm()), float(d.abs().max()) / rms


def low_sum(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """Row sums with LANES bf16/fp16 accumulators per row, each updated one element at a time."""
    rows, n = x.shape
    xs = x.reshape(rows, n // LANES, LANES)
    acc = torch.zeros(rows, LANES, dtype=dt, device=x.device)
    for i in range(n // LANES):
        acc = (acc.float() + xs[:, i].float()).to(dt)   # one rounding per step, as a bf16 add does
    return acc.float().sum(1).to(dt)


def low_matmul(a: torch.Tensor, b: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=dt, device=a.device)
    for k in range(0, a.shape[1], TILE_K):
        acc = (acc.float() + a[:, k:k + TILE_K].float() @ b[k:k + TILE_K].float()).to(dt)
    return acc


def cases(n: int, dt: torch.dtype, device: str) -> dict:
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int, pos: bool = False) -> torch.Tensor:
        t = torch.rand(*shape, generator=g) if pos else torch.randn(*shape, generator=g)
        return t.to(dt).to(device)

    x, xp = rnd(16, n), rnd(16, n, pos=True)
    a, b = rnd(64, n), rnd(n, 64)
    w, bias = rnd(n), rnd(n)
    out = {}
    out[f"sum of N(0,1), R={n}"] = (x, lambda t: t.sum(1), lambda t: low_sum(t, dt))
    out[f"sum of U(0,1), R={n}"] = (xp, lambda t: t.sum(1), lambda t: low_sum(t, dt))
    out[f"mean of U(0,1), R={n}"] = (xp, lambda t: t.mean(1), lambda t: (low_sum(t, dt).float() / n).to(dt))
    out[f"matmul 64x{n}x64"] = ((a, b), lambda t: t[0] @ t[1], lambda t: low_matmul(t[0], t[1], dt))

    def low_softmax(t: torch.Tensor) -> torch.Tensor:
        e = torch.exp(t.float() - t.float().amax(1, keepdim=True))
        return (e / low_sum(e.to(dt), dt).float()[:, None]).to(dt)

    out[f"softmax, R={n}"] = (x, lambda t: torch.softmax(t, 1), low_softmax)

    def layer_norm(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(t, (n,), w.to(t.dtype), bias.to(t.dtype))

    def low_layer_norm(t: torch.Tensor) -> torch.Tensor:
        mean = low_sum(t, dt).float()[:, None] / n
        var = low_sum(((t.float() - mean) ** 2).to(dt), dt).float()[:, None] / n
        return ((t.float() - mean) / torch.sqrt(var + 1e-5) * w.float() + bias.float()).to(dt)

    out[f"layernorm, R={n}"] = (x + 3, layer_norm, low_layer_norm)
    return out


def _in(fn, inp, dtype: torch.dtype) -> torch.Tensor:
    """`fn` computed on the inputs converted to `dtype` (the same rounded values, wider arithmetic)."""
    return fn(tuple(t.to(dtype) for t in inp)) if isinstance(inp, tuple) else fn(inp.to(dtype))


def run(dtype: str, device: str, n: int) -> list[dict]:
    dt = DTYPES[dtype]
    rows = []
    for name, (inp, fn, low) in cases(n, dt, device).items():
        exact = _in(fn, inp, torch.float64).double()
        fp32acc = _in(fn, inp, torch.float32).to(dt)
        eager = fn(inp)
        r = {"case": name, "dtype": dtype, "device": device}
        for key, got, want in (("fp32acc", fp32acc, exact), ("eager", eager, exact),
                               ("fp32acc~eager", fp32acc, eager.double()), ("lowacc", low(inp), exact),
                               ("lowacc~eager", low(inp), eager.double())):
            r[key] = err(got, want)
        rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=4096, help="reduction length (a multiple of 64)")
    ap.add_argument("--out", help="folder for results.json")
    a = ap.parse_args()
    rows = run(a.dtype, a.device, a.n)
    keys = ("fp32acc", "eager", "fp32acc~eager", "lowacc", "lowacc~eager")
    print(f"{a.dtype} on {a.device}: normwise relative error (worst element / RMS)")
    print(f"{'case':28s}" + "".join(f"{k:>22s}" for k in keys))
    for r in rows:
        print(f"{r['case']:28s}" + "".join(f"{r[k][0]:>12.2e} ({r[k][1]:7.1e})" for k in keys))
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "results.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
