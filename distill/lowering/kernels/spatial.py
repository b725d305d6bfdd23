"""Pooling (max, avg, adaptive; 1-3 spatial dims), and the spatial-dim names the convs share.

The names are shared with kernels/conv.py.

Spatial dims are named as torch documents them (L; H, W; D, H, W) and each gets its own constexpr
stride and padding, so a pool2d kernel reads like a pool2d kernel.
"""
from __future__ import annotations

import math

from distill.lowering import exprs
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render, store_offset)
from distill.lowering.kernels.pool_rows import row_walk, window_bound
from distill.lowering.kernels.split import SMS, cdiv
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym

NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


def col(c: str | None, axis: str) -> str | None:
    """A coordinate broadcast along `axis` (`rp` -> `rp[:, None]`); None stays None (a size-1 dim)."""
    return None if c is None else f"{c}{axis}"


def is_single(size_out: int) -> bool:
    """One output along a dim, for good: its adaptive window is the whole input dim."""
    return size_out == 1 and not isinstance(size_out, Sym)


def _adaptive_window(size_in: int, size_out: int) -> int:
    if is_single(size_out):
        return size_in
    if isinstance(size_in, Sym) or isinstance(size_out, Sym):
        # read at run time: a bound on every window, ceil(in / out) + 1 (the mask trims each one)
        return (size_in + size_out - 1) // size_out + 1
    return max(-(-((o + 1) * size_in) // size_out) - (o * size_in) // size_out for o in range(size_out))


def in_bounds(coord: str, size: object) -> str:
    """`0 <= coord < size` as one compare: a negative coordinate read as unsigned is past any size.
    The gathers of padded pools and convs test this per element of a [BLOCK_P, BLOCK_W] or
    [BLOCK_R, BLOCK_P] tile; on an H100 the single compare made a conv_transpose3d 1.26x and a padded
    avg_pool1d 1.16x faster than the two (bench/candidate_variants_gpu.py)."""
    return f"({coord}.to(tl.uint32) < {size})"


def looped_positions(windows: int) -> int:
    """BLOCK_P of a looped (long-window) pool: 16 windows a program, fewer while that leaves under 8
    programs per SM. An adaptive_avg_pool3d to 2x2x2 over (23, 10, 64, 256, 45) has 1840 windows of
    94K taps: 115 programs of 16 windows left most of an H100 idle (14.0 ms, eager 6.1), one window a
    program took 0.48 ms; an adaptive_max_pool3d with 7296 windows of 3.2K taps went 4.1 -> 1.8 ms at
    4 (bench/candidate_variants_gpu.py)."""
    bp = 16
    while bp > 1 and cdiv(windows, bp) < 8 * SMS:
        bp //= 2
    return bp


# Fixed windows of up to this many taps are walked one tap at a time (unrolled); adaptive windows,
# which vary by position, and longer fixed ones keep the [BLOCK_P, BLOCK_W] gather tile.
TAPS_MAX = 128
# output positions a program of the tap form takes: on an H100 an avg_pool1d of 11 taps ran 0.177 ms
# at 256, 0.204 at 128 and 0.213 at 1024; windows of TAPS_WIDE taps or more take 8 warps, one position
# a thread (an avg_pool2d of 11 x 11 taps: 0.586 ms with 4 warps, 0.380 with 8, 0.382 at BLOCK_P 128)
TAPS_BLOCK_P, TAPS_WIDE = 256, 32


def tap_lines(dims: tuple[str, ...], windows: tuple[int, ...], outs: list[str | None], sizes: list[str],
              pad: int, dil: int, load: list[str], accumulate: str) -> tuple[list[str], list[str | None]]:
    """The nested `tl.static_range` loops of the tap form: per dim its tap `k<d>`, the input coordinate
    of every position at that tap and (padded) its bounds; the loads and `accumulate` innermost.
    Returns the lines (`load` placed innermost) and the input coordinate names (None: a dim whose
    coordinate is always 0)."""
    lines: list[str] = []
    ins: list[str | None] = []
    ok: list[str] = []
    depth = 0
    for d, win, o, size in zip(dims, windows, outs, sizes):
        low = d.lower()
        ind = "    " * depth
        tap = None
        if win > 1:
            lines.append(f"{ind}for k{low} in tl.static_range({win}):")
            depth += 1
            ind = "    " * depth
            tap = f"k{low} * DIL_{d}" if dil != 1 else f"k{low}"
        parts = [t for t in (f"{o} * STRIDE_{d}" if o else None, tap) if t]
        if not parts and not pad:
            ins.append(None)
            continue
        expr = " + ".join(parts) if parts else "0"
        if not o:
            expr = f"rp * 0 + {expr}"  # a position-independent coordinate, as a [BLOCK_P] vector
        lines.append(f"{ind}in_{low} = {expr}" + (f" - PAD_{d}" if pad else ""))
        if pad:
            lines.append(f"{ind}ok_{low} = {in_bounds(f'in_{low}', size)}")
            ok.append(f"ok_{low}")
        ins.append(f"in_{low}")
    ind = "    " * depth
    lines.append(f"{ind}valid = " + " & ".join(["p_mask"] + ok))
    lines += [ind + ln for ln in load] + [ind + accumulate]
    return lines, ins


class Pool(Family):
    name = "pool"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        x = op.inputs[0]
        return [OperandSpec("x", x, (), prog.values[x].shape)]

    def describe(self, k: Kernel) -> str:
        args = ", ".join(f"{key}={v}" for key, v in sorted(k.op.attrs.items()))
        what = f"{k.op.op}({exprs.describe(k.operands['x'].expr)}, {args})"
        return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        op, a = k.op, k.op.attrs
        x_shape, out_shape = k.operands["x"].space, op.shape
        nd = len(x_shape) - 2
        dims = NAMES[nd]
        adaptive = op.op.startswith("adaptive")
        is_max = "max" in op.op
        pad = 0 if adaptive else a["padding"]
        dil = 1 if adaptive else a.get("dilation", 1)   # max pools only: window taps `dil` apart
        windows = tuple(_adaptive_window(x_shape[2 + j], out_shape[2 + j]) for j in range(nd)) if adaptive \
            else (a["kernel_size"],) * nd
        launch = Launch(fwd)
        launch.scalar("P", math.prod(out_shape))
        consts = {} if adaptive else {f"STRIDE_{d}": a["stride"] for d in dims} | {f"PAD_{d}": pad for d in dims}
        if dil != 1:
            consts |= {f"DIL_{d}": dil for d in dims}
        if not adaptive and math.prod(windows) <= TAPS_MAX:
            return self._emit_taps(k, name, launch, dims, windows, pad, dil, consts)
        # windows of up to 1024 taps in one tile; longer ones (adaptive pools of long dims: 7038 taps
        # made [16, 8192] tiles that spilled, 13 ms against eager's 3.9 ms on an H100) are looped over,
        # without software pipelining (num_stages=1): the first looped form returned wrong maxima and
        # means on the H100 where the interpreter agreed with torch, so the loop stays the simplest one
        looped = int(math.prod(windows)) > 1024
        bp = looped_positions(int(math.prod(out_shape))) if looped else 0
        rows = adaptive and looped
        pre: list[str] = []
        total = math.prod(windows)
        if rows:
            # looped adaptive windows walk whole rows of the innermost dim (kernels/pool_rows.py)
            bounds_in = tuple(windows[j] if is_single(out_shape[2 + j]) else window_bound(x_shape[2 + j], out_shape[2 + j])
                              for j in range(nd))
            windows, total, bw, pre = row_walk(bounds_in, bp, fwd)
        launch.scalar("WINDOW", total)
        p = coord_names(out_shape, "rp", "p")
        w = coord_names(windows, "rw", "w")
        in_lines: list[str] = []
        bounds: list[str] = []
        valid = ["p_mask[:, None]", "w_mask[None, :]"]
        ins: list[str | None] = []
        divisor = []
        for j, d in enumerate(dims):
            o, kd, low = p[2 + j], col(w[j], "[None, :]"), d.lower()
            size = launch.scalar(f"IN_{d}", x_shape[2 + j])
            if adaptive and o is None:
                # a single output along this dim: its window is the whole input dim
                if kd:
                    in_lines.append(f"in_{low} = {kd}")
                    if rows and j == nd - 1:
                        valid.append(f"(in_{low} < {size})")  # the row's padding past the dim
                divisor.append(size)
                if not kd:
                    ins.append(None)
                    continue
            elif adaptive:
                osz = launch.scalar(f"OUT_{d}", out_shape[2 + j])
                # the window's bounds depend on the position only: computed once, before the tap loop
                bounds += [f"start_{low} = ({o} * {size}) // {osz}",
                           f"end_{low} = (({o} + 1) * {size} + {osz} - 1) // {osz}"]
                in_lines.append(f"in_{low} = start_{low}[:, None]" + (f" + {kd}" if kd else ""))
                valid.append(f"(in_{low} < end_{low}[:, None])")
                divisor.append(f"(end_{low} - start_{low})")
            else:
                tap = f"{kd} * DIL_{d}" if kd and dil != 1 else kd
                parts = [t for t in (f"{o}[:, None] * STRIDE_{d}" if o else None, tap) if t]
                if not parts and not pad:
                    ins.append(None)
                    continue
                in_lines.append(f"in_{low} = {' + '.join(parts) or '0'}" + (f" - PAD_{d}" if pad else ""))
                if pad:
                    valid.append(in_bounds(f"in_{low}", size))
            ins.append(f"in_{low}")
        in_lines.append("valid = " + " & ".join(valid))
        x_coords = [col(p[0], "[:, None]"), col(p[1], "[:, None]")] + ins
        fill = 'float("-inf")' if is_max else "0.0"
        x = k.operands["x"].expr
        load, res = operand_lines(launch, x, x_coords, "valid", other=fill, var="xv", full="(BLOCK_P, BLOCK_W)",
                                  exact=True)
        if not isinstance(x, exprs.Load):
            load.append(f"xv = tl.where(valid, {res}, {fill})")
        out_coords = list(p)
        epi, value = operand_lines(launch, k.expr, out_coords, "p_mask", flat="rp", other="0.0")
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, "rp", "(BLOCK_P,)")
        div = ("(" + " * ".join(divisor) + ")" if len(divisor) > 1 else divisor[0]) if adaptive \
            else str(math.prod(windows))
        used = "\n".join(bounds + in_lines + load + epi + [off, div])
        p_lines = coord_lines(out_shape, "rp", "p", launch, used) + bounds
        w_lines = coord_lines(windows, "rw", "w", launch, used)
        if not rows:
            bw = pow2(math.prod(windows), hi=1024) if looped else pow2(math.prod(windows))
        if not looped:
            # a tile of at most 4096 values, as the looped forms: a floor of 16 positions made [16, 1024]
            # tiles for adaptive windows of 5 x 176 taps, which spilled (an adaptive_avg_pool2d of
            # (362, 16, 27, 1218) to 7: 1.19 ms on an H200, eager 0.52; seed 808's L1-ede031c2). A
            # constant from the drawn sizes: a longer window at run time still fits BLOCK_W, and a
            # program takes at least one position
            bp = max(1, min(pow2(math.prod(out_shape)), max(16, 4096 // bw)))
            if int(bw) > 4096 // 16:
                bp = max(1, min(pow2(int(math.prod(out_shape))), 4096 // int(bw)))
        src = render("pool.py.j2", name=name, signature=launch.signature(list(consts) + ["BLOCK_P", "BLOCK_W"]),
                     comment=self.describe(k), p_lines=p_lines, w_lines=w_lines, in_lines=in_lines, load=load,
                     is_max=is_max, looped=looped, rows=rows, taps=False, divisor=div, padded=bool(pad), epilogue=epi, out=out,
                     out_off=off, value=value)
        grid = f"(triton.cdiv({math.prod(out_shape)}, BLOCK_P),)"
        return src, pre + launch.call(name, grid, {**consts, "BLOCK_P": bp, "BLOCK_W": bw} | ({"num_stages": 1} if looped else {}))


    def _emit_taps(self, k: Kernel, name: str, launch: Launch, dims: tuple[str, ...], windows: tuple[int, ...],
                   pad: int, dil: int, consts: dict) -> tuple[str, list[str]]:
        """A fixed window walked one tap at a time: each tap loads a [BLOCK_P] vector of positions.
        On an H100 an avg_pool1d of 11 taps over (215, 16384, 23) took 1.02 ms as a [256, 16] gather
        tile and 0.177 ms this way (eager 0.35 ms)."""
        op = k.op
        x_shape, out_shape = k.operands["x"].space, op.shape
        is_max = "max" in op.op
        p = coord_names(out_shape, "rp", "p")
        sizes = [launch.scalar(f"IN_{d}", x_shape[2 + j]) if pad else "" for j, d in enumerate(dims)]
        fill = 'float("-inf")' if is_max else "0.0"
        # the coordinates' names are fixed by the dims: the loads are written before the loops are
        _, ins = tap_lines(dims, windows, p[2:], sizes, pad, dil, [], "")
        x = k.operands["x"].expr
        load, res = operand_lines(launch, x, [p[0], p[1]] + ins, "valid", other=fill, var="xv", full="(BLOCK_P,)",
                                  exact=True)
        if not isinstance(x, exprs.Load):
            load.append(f"xv = tl.where(valid, {res}, {fill})")
        # torch's max pool returns NaN when a window holds one: the max propagates it
        acc = "acc = tl.maximum(acc, xv, propagate_nan=tl.PropagateNan.ALL)" if is_max else "acc += xv"
        body, _ = tap_lines(dims, windows, p[2:], sizes, pad, dil, load, acc)
        epi, value = operand_lines(launch, k.expr, list(p), "p_mask", flat="rp", other="0.0")
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, list(p), "rp", "(BLOCK_P,)")
        div = str(math.prod(windows))
        p_lines = coord_lines(out_shape, "rp", "p", launch, "\n".join(body + epi + [off]))
        window = " x ".join(str(w) for w in windows)
        src = render("pool.py.j2", name=name, signature=launch.signature(list(consts) + ["BLOCK_P"]),
                     comment=self.describe(k), p_lines=p_lines, taps=True, tap_lines=body, window=window,
                     is_max=is_max, looped=False, divisor=div, padded=bool(pad), epilogue=epi, out=out,
                     out_off=off, value=value)
        bp = max(1, min(pow2(math.prod(out_shape)), TAPS_BLOCK_P))
        warps = {"num_warps": 8} if math.prod(windows) >= TAPS_WIDE else {}
        return src, launch.call(name, f"(triton.cdiv({math.prod(out_shape)}, BLOCK_P),)", {**consts, "BLOCK_P": bp, **warps})


FAMILIES = (Pool(),)
