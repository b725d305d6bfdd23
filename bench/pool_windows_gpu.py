"""GPU check of the pool kernels' two forms (issue 16): long windows (over 1024 taps, looped) and short
ones (one tile), each lowered through the tracer, run on cuda and compared with torch, with a rough
time of both (mean of 5 calls). The Triton interpreter agreed with torch on a first looped form that
was wrong on an H100, so this runs where the kernels really run:

    python3 bench/pool_windows_gpu.py        # on the GPU box, synth's wheels on PYTHONPATH
"""
from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from distill.lowering.selfcheck import build  # noqa: E402
from distill.lowering.trace import lower_source  # noqa: E402
from tests.distill.lowering.test_pool_windows import SOURCE  # noqa: E402

CASES = {"adaptive_avg_2d_long": ("F.adaptive_avg_pool2d(x, 1)", "64, 32, 100, 100"),
         "adaptive_max_1d_long": ("F.adaptive_max_pool1d(x, 2)", "64, 32, 30000"),
         "adaptive_max_2d_t_long": ("F.adaptive_max_pool2d(x.transpose(0, 3), 2)", "609, 10, 45, 609"),
         "max_3d_short": ("F.max_pool3d(x, 3, stride=2, padding=1)", "8, 16, 40, 40, 40"),
         "avg_3d_short": ("F.avg_pool3d(x, 3, stride=2, padding=1)", "8, 16, 40, 40, 40")}


def _ms(fn, x) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / 5 * 1e3


def main() -> None:
    for key, (expr, shape) in CASES.items():
        src = SOURCE.format(expr=expr, shape=shape)
        new_src = lower_source(types.SimpleNamespace(source=src, problem_id=key)).source
        ref, new, mod = build(src, new_src, "cuda")
        x = mod.get_inputs()[0].cuda()
        with torch.no_grad():
            want, got = ref(x), new(x)
            err = float((want - got).norm() / want.norm())
            tn, te = _ms(new, x), _ms(ref, x)
        print(f"poolcheck {key}: rel err {err:.2e} {'OK' if err < 1e-5 else 'WRONG'}; "
              f"lowered {tn:.3f} ms, eager {te:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
