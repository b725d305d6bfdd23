"""Convolutions (1-3 spatial dims, grouped, dilated, transposed) and pooling (max, avg, adaptive).

Spatial dims are named as torch documents them (L; H, W; D, H, W) and each gets its own
constexpr stride, padding and dilation, so a conv2d kernel reads like a conv2d kernel. Parameters
(`weight`, `bias`) are the reference module's own tensors.
"""
from __future__ import annotations

import math

from distill.lowering import exprs, views
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render, store_offset)
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym

NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


def per_dim(attrs: dict, name: str, nd: int) -> tuple[int, ...]:
    """An attribute's value along each spatial dim: `kernel_size_h`, `kernel_size_w` (the catalog draws
    2-D and 3-D convs so) or one `kernel_size` for every dim."""
    axes = [f"{name}_{d.lower()}" for d in NAMES[nd]]
    if all(a in attrs for a in axes):
        return tuple(attrs[a] for a in axes)
    return (attrs[name],) * nd


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _col(c: str | None, axis: str) -> str | None:
    return None if c is None else f"{c}{axis}"


class Conv(Family):
    name = "conv"

    def slot_roles(self, op: Op) -> list[str]:
        return ["x"]

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        x = op.inputs[0]
        specs = [OperandSpec("x", x, (), prog.values[x].shape),
                 OperandSpec("w", "weight", (), op.params["weight"].shape)]
        if "bias" in op.params:
            steps = views.along(1, op.shape[1], op.shape, op.name)
            specs.append(OperandSpec("bias", "bias", tuple(steps), op.shape))
        return specs

    def describe(self, k: Kernel) -> str:
        a, nd = k.op.attrs, len(k.op.shape) - 2
        dims = {n: (lambda v: v[0] if len(set(v)) == 1 else v)(per_dim(a, n, nd))
                for n in ("kernel_size", "stride", "padding", "dilation")}
        what = (f"{k.op.op}({exprs.describe(k.operands['x'].expr)}, weight, bias, stride={dims['stride']}, "
                f"padding={dims['padding']}, dilation={dims['dilation']}, groups={a['groups']})")
        return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        op, a = k.op, k.op.attrs
        transposed = op.op.startswith("conv_transpose")
        x_shape, out_shape = k.operands["x"].space, op.shape
        nd = len(x_shape) - 2
        dims = NAMES[nd]
        n, c = x_shape[0], x_shape[1]
        groups, ks = a["groups"], per_dim(a, "kernel_size", nd)
        stride, pad, dil = (per_dim(a, n, nd) for n in ("stride", "padding", "dilation"))
        cg, ocg = c // groups, op.shape[1] // groups
        launch = Launch(fwd)
        consts = {}
        for j, d in enumerate(dims):
            consts.update({f"STRIDE_{d}": stride[j], f"PAD_{d}": pad[j], f"DIL_{d}": dil[j]})
        # a transposed conv's output o takes tap k only where (o + pad - k * dil) % stride == 0: each
        # program runs one phase (o + pad) % stride per dim, its outputs o0 + m * stride and its taps
        # k0 + i * STEP only (sub-pixel decomposition), instead of testing every tap at every output
        taps = tuple(-(-ks[j] // (stride[j] // math.gcd(stride[j], dil[j]))) for j in range(nd)) if transposed else ks
        outs = tuple(out_shape[2:])
        p_shape = (n,) + (tuple((o + s - 1) // s for o, s in zip(outs, stride)) if transposed else outs)
        launch.scalar("P", _prod(p_shape))
        launch.scalar("OCG", ocg)
        launch.scalar("RED", cg * _prod(taps))
        p = coord_names(p_shape, "rp", "p")
        r = coord_names((cg,) + taps, "rr", "r")
        in_lines, in_mask = [], ["p_mask[:, None]", "r_mask[None, :]"]
        ph_lines, tap_lines, tap_ok = [], [], ["r_mask"]
        if transposed:
            consts["GROUPS"] = groups
            ph_lines += ["ph = g // GROUPS  # axis 2 runs over (phase, group) pairs", "g = g % GROUPS"]
        ins: list[str | None] = []
        for j, d in enumerate(dims):
            o, kd, low = _col(p[1 + j], "[:, None]"), _col(r[1 + j], "[None, :]"), d.lower()
            size = launch.scalar(f"IN_{d}", x_shape[2 + j])
            if transposed:
                gcd = math.gcd(stride[j], dil[j])
                step = stride[j] // gcd
                consts.update({f"KS_{d}": ks[j], f"STEP_{d}": step, f"DSTEP_{d}": dil[j] // gcd,
                               f"INV_{d}": pow(dil[j] // gcd, -1, step) if step > 1 else 0})
                inner = "".join(f" // STRIDE_{e}" for e in dims[j + 1:])
                ph_lines += [f"phi_{low} = ph{inner} % STRIDE_{d}",
                             f"o0_{low} = (phi_{low} + STRIDE_{d} - PAD_{d} % STRIDE_{d}) % STRIDE_{d}",
                             f"k0_{low} = (phi_{low} // {gcd}) * INV_{d} % STEP_{d}",
                             f"base_{low} = (o0_{low} + PAD_{d} - k0_{low} * DIL_{d}) // STRIDE_{d}",
                             f"o_{low} = o0_{low} + {p[1 + j] or '0 * rp'} * STRIDE_{d}",
                             f"p_mask = p_mask & (o_{low} < {launch.scalar(f'OUT_{d}', outs[j])})"]
                tap_lines.append(f"k_{low} = k0_{low}" + (f" + {r[1 + j]} * STEP_{d}" if r[1 + j] else ""))
                tap_ok.append(f"(k_{low} < KS_{d})" + (f" & (phi_{low} % {gcd} == 0)" if gcd > 1 else ""))
                in_lines.append(f"in_{low} = base_{low}" + (f" + {o}" if o else "") + (f" - {kd} * DSTEP_{d}" if kd else ""))
                in_mask += [f"(in_{low} >= 0)", f"(in_{low} < {size})"]
                ins.append(f"in_{low}")
                continue
            terms = [t for t in (f"{o} * STRIDE_{d}" if o else None, f"{kd} * DIL_{d}" if kd else None) if t]
            if not terms and not pad[j]:
                ins.append(None)  # a single position: index 0
                continue
            in_lines.append(f"in_{low} = {' + '.join(terms) or '0'}" + (f" - PAD_{d}" if pad[j] else ""))
            if pad[j]:
                in_mask += [f"(in_{low} >= 0)", f"(in_{low} < {size})"]
            ins.append(f"in_{low}")
        if transposed:
            in_lines = tap_lines + ["tap_ok = " + " & ".join(tap_ok)] + in_lines
            in_mask[1] = "tap_ok[None, :]"
        in_lines.append("in_mask = " + " & ".join(in_mask))
        if groups > 1:
            launch.scalar("CG", cg)
        # the input channel of each reduction lane (g * CG + c within the group)
        if r[0]:
            c_in = f"(g * CG + {r[0]})" if groups > 1 else r[0]
            x_c, w_c = _col(c_in, "[None, :]"), _col(c_in, "[:, None]")
        else:
            x_c = w_c = ("g * CG" if cg > 1 else "g") if groups > 1 else None
        x_coords = [_col(p[0], "[:, None]"), x_c] + ins
        load_x, _ = operand_lines(launch, k.operands["x"].expr, x_coords, "in_mask", other="0.0", var="xv",
                                  full="(BLOCK_P, BLOCK_R)", exact=True)
        oc = "(g * OCG + roc)" if groups > 1 else "roc"
        if transposed:
            w_taps = [f"k_{d.lower()}" + ("[:, None]" if r[1 + j] else "") for j, d in enumerate(dims)]
            w_coords = [w_c, "roc[None, :]"] + w_taps
        else:
            w_coords = [f"{oc}[None, :]", _col(r[0], "[:, None]")] + [_col(r[1 + j], "[:, None]") for j in range(nd)]
        w_mask = "tap_ok[:, None] & oc_mask[None, :]" if transposed else "r_mask[:, None] & oc_mask[None, :]"
        load_w, _ = operand_lines(launch, k.operands["w"].expr, w_coords, w_mask,
                                  other="0.0", var="wv", exact=True, full="(BLOCK_R, BLOCK_OC)")
        o_coords = [f"o_{d.lower()}[:, None]" for d in dims] if transposed else \
            [_col(p[1 + j], "[:, None]") for j in range(nd)]
        out_coords = [_col(p[0], "[:, None]"), f"{oc}[None, :]"] + o_coords
        bias: list[str] = []
        if "bias" in k.operands:
            body, res = operand_lines(launch, k.operands["bias"].expr, out_coords, "mask", other="0.0",
                                      full="(BLOCK_P, BLOCK_OC)")
            bias = body + [f"acc += {res}"]
        epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full="(BLOCK_P, BLOCK_OC)")
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, None, "(BLOCK_P, BLOCK_OC)")
        used = "\n".join(ph_lines + in_lines + load_x + load_w + bias + epi + [off])
        p_lines = coord_lines(p_shape, "rp", "p", launch, used) + ph_lines
        r_lines = coord_lines((cg,) + taps, "rr", "r", launch, used)
        bp = (pow2(_prod(p_shape), 16, 64), pow2(_prod(p_shape), 16, 256))
        boc = pow2(ocg, 16, 64)
        br = (pow2(cg * _prod(taps), 16, 64), pow2(cg * _prod(taps), 16, 256))
        src = render("conv.py.j2", name=name, signature=launch.signature(list(consts) + ["BLOCK_P", "BLOCK_OC", "BLOCK_R"]),
                     comment=self.describe(k), p_lines=p_lines, r_lines=r_lines, in_lines=in_lines,
                     load_x=load_x[0], load_w=load_w[0], bias=bias, epilogue=epi, out=out, out_off=off, value=value)
        grid = f"(triton.cdiv({_prod(p_shape)}, BLOCK_P), triton.cdiv({ocg}, BLOCK_OC), {groups * _prod(stride) if transposed else groups})"
        return src, launch.call(name, grid, {**consts, "BLOCK_P": bp, "BLOCK_OC": boc, "BLOCK_R": br})


def _adaptive_window(size_in: int, size_out: int) -> int:
    if size_out == 1 and not isinstance(size_out, Sym):
        return size_in
    if isinstance(size_in, Sym) or isinstance(size_out, Sym):
        # read at run time: a bound on every window, ceil(in / out) + 1 (the mask trims each one)
        return (size_in + size_out - 1) // size_out + 1
    return max(-(-((o + 1) * size_in) // size_out) - (o * size_in) // size_out for o in range(size_out))


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
        launch.scalar("P", _prod(out_shape))
        launch.scalar("WINDOW", _prod(windows))
        consts = {} if adaptive else {f"STRIDE_{d}": a["stride"] for d in dims} | {f"PAD_{d}": pad for d in dims}
        if dil != 1:
            consts |= {f"DIL_{d}": dil for d in dims}
        p = coord_names(out_shape, "rp", "p")
        w = coord_names(windows, "rw", "w")
        in_lines: list[str] = []
        valid = ["p_mask[:, None]", "w_mask[None, :]"]
        ins: list[str | None] = []
        divisor = []
        for j, d in enumerate(dims):
            o, kd, low = p[2 + j], _col(w[j], "[None, :]"), d.lower()
            size = launch.scalar(f"IN_{d}", x_shape[2 + j])
            if adaptive and o is None:
                # a single output along this dim: its window is the whole input dim
                if kd:
                    in_lines.append(f"in_{low} = {kd}")
                divisor.append(size)
                if not kd:
                    ins.append(None)
                    continue
            elif adaptive:
                osz = launch.scalar(f"OUT_{d}", out_shape[2 + j])
                in_lines += [f"start_{low} = ({o} * {size}) // {osz}",
                             f"end_{low} = (({o} + 1) * {size} + {osz} - 1) // {osz}",
                             f"in_{low} = start_{low}[:, None]" + (f" + {kd}" if kd else "")]
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
                    valid += [f"(in_{low} >= 0)", f"(in_{low} < {size})"]
            ins.append(f"in_{low}")
        in_lines.append("valid = " + " & ".join(valid))
        x_coords = [_col(p[0], "[:, None]"), _col(p[1], "[:, None]")] + ins
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
            else str(_prod(windows))
        used = "\n".join(in_lines + load + epi + [off, div])
        p_lines = coord_lines(out_shape, "rp", "p", launch, used)
        w_lines = coord_lines(windows, "rw", "w", launch, used)
        bw = pow2(_prod(windows))
        bp = tuple(max(1, min(pow2(_prod(out_shape)), max(16, tile // bw))) for tile in (4096, 16384))
        src = render("pool.py.j2", name=name, signature=launch.signature(list(consts) + ["BLOCK_P", "BLOCK_W"]),
                     comment=self.describe(k), p_lines=p_lines, w_lines=w_lines, in_lines=in_lines, load=load,
                     is_max=is_max, divisor=div, padded=bool(pad), epilogue=epi, out=out, out_off=off, value=value)
        grid = f"(triton.cdiv({_prod(out_shape)}, BLOCK_P),)"
        return src, launch.call(name, grid, {**consts, "BLOCK_P": bp, "BLOCK_W": bw})


FAMILIES = (Conv(), Pool())
