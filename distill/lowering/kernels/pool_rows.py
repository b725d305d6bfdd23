"""The window walk of a looped adaptive pool: whole rows of the innermost (contiguous) dim per tile.

An adaptive pool of a long dim has windows of thousands of taps, walked BLOCK_W taps a step. The first
looped form flattened each window's (d, h, w) taps into one index and held [16, 1024] tiles: 128
values, masks and addresses a thread at 4 warps, which spill, and a window bound of ceil(in / out) + 1
per dim walked a third more taps than any window has. On an H200 an adaptive_avg_pool3d of
(512, 32, 215, 5, 8) to 2x2x2 ran 14.5 ms so, eager 3.1 (issue 34). Here the innermost window is
padded to a power of two, so the taps of one row sit side by side in a tile and the tile's lanes read
runs of contiguous memory; the outer dims step row by row; a tile holds at most TILE_BUDGET values; and
a dim's bound is exact for literal sizes and at most one over otherwise.
"""
from __future__ import annotations

from distill.lowering.kernels.base import Forward, pow2
from distill.lowering.sizes import Sym, smin

# values one [BLOCK_P, BLOCK_W] tile may hold: 32 a thread at 4 warps (the unlooped pools' budget)
TILE_BUDGET = 4096
# taps a step, at most (issue 16: longer tiles of a 7038-tap window spilled on an H100)
TAPS_MAX = 1024


def window_bound(size_in: int, size_out: int) -> int:
    """The longest adaptive window of `size_in` pooled to `size_out`. Windows run from floor(o * in /
    out) to ceil((o + 1) * in / out): ceil(in / out) taps when out divides in, one more at most
    otherwise. Exact for literal sizes; read at run time, the bound forward computes."""
    if isinstance(size_in, Sym) or isinstance(size_out, Sym):
        return (size_in + size_out - 1) // size_out + smin(size_in % size_out, 1)
    return max(-(-((o + 1) * size_in) // size_out) - (o * size_in) // size_out for o in range(size_out))


def row_walk(windows: tuple[int, ...], block_p: int, fwd: Forward) -> tuple[tuple[int, ...], int, int, list[str]]:
    """The walked window (`windows` with the innermost padded to a multiple of a power of two, that
    power as large as the tile allows), its taps, BLOCK_W (the taps a step: a power of two, a multiple
    of the innermost padding, at most TILE_BUDGET // block_p and TAPS_MAX) and the forward lines that
    name the sizes read at run time (each expression is written once)."""
    lines: list[str] = []

    def bind(x: int, base: str) -> int:
        if not isinstance(x, Sym):
            return x
        name = fwd.fresh(base)
        lines.append(f"{name} = {x}")
        return Sym(int(x), name)

    budget = min(TAPS_MAX, max(1, TILE_BUDGET // block_p))
    last = bind(windows[-1], "row_window")
    inner = bind(pow2(last, hi=budget), "row_pad")
    row = last if int(last) == int(inner) and not isinstance(last, Sym) else bind((last + inner - 1) // inner * inner, "row_taps")
    walked = tuple(windows[:-1]) + (row,)
    total: int = 1
    for w in walked:
        total = total * w
    total = bind(total, "window_taps")
    return walked, total, pow2(total, hi=budget), lines
