"""Convolutions (1-3 spatial dims, grouped, dilated, transposed) as implicit GEMMs.

They are split along the reduction when the outputs are few.

Spatial dims are named as torch documents them (L; H, W; D, H, W) and each gets its own
constexpr stride, padding and dilation, so a conv2d kernel reads like a conv2d kernel. Parameters
(`weight`, `bias`) are the reference module's own tensors.

A program computes a [BLOCK_P positions, BLOCK_OC channels] tile and walks the reduction RED = (input
channels per group) x taps. With few output tiles and a long RED that leaves most SMs idle:
nn.Conv1d(65536, 11, 11, ...) on a (2, 65536, L) input ran 19 programs, each walking RED = 720,896
(38.7 ms vs eager 1.19 ms on an H100). Then the reduction is split as matmul's K is
(kernels/split.py): one program per (tile, RED chunk) stores an fp32 partial tile into a
[SPLIT, NG, P, OCG] buffer, and a second kernel adds the SPLIT partials in a fixed order
(deterministic, no atomics), then the bias and the epilogue. Whether to split is decided from the
problem's sizes; the chunk count is computed in forward, so a resized input is still correct.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from distill.lowering import exprs, views
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render, store_offset)
from distill.lowering.kernels.spatial import NAMES, col, in_bounds
from distill.lowering.kernels.split import cdiv, chunk_lines, part_name, text, worth_splitting
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit

# RED elements per program, at least, when the reduction is split (32 BLOCK_R steps of 16): enough
# work per program to hide the partial tile's store and the combining kernel, as matmul's MIN_K_CHUNK
MIN_R_CHUNK = 512


def per_dim(attrs: dict, name: str, nd: int) -> tuple[int, ...]:
    """An attribute's value along each spatial dim: `kernel_size_h`, `kernel_size_w` (the catalog draws
    2-D and 3-D convs so) or one `kernel_size` for every dim."""
    axes = [f"{name}_{d.lower()}" for d in NAMES[nd]]
    if all(a in attrs for a in axes):
        return tuple(attrs[a] for a in axes)
    return (attrs[name],) * nd


@dataclass
class _Geometry:
    """A conv's sizes as its kernels see them: output positions P (per phase, for a transposed conv),
    OCG channels per group, the reduction over (channel, tap) pairs, and grid axis 2's NG."""

    transposed: bool
    dims: tuple[str, ...]
    x_shape: tuple[int, ...]
    groups: int
    cg: int
    ocg: int
    ks: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    taps: tuple[int, ...]
    outs: tuple[int, ...]
    p_shape: tuple[int, ...]
    consts: dict = field(default_factory=dict)

    @classmethod
    def of(cls, k: Kernel) -> "_Geometry":
        op, a = k.op, k.op.attrs
        transposed = op.op.startswith("conv_transpose")
        x_shape = k.operands["x"].space
        nd = len(x_shape) - 2
        dims = NAMES[nd]
        groups, ks = a["groups"], per_dim(a, "kernel_size", nd)
        stride, pad, dil = (per_dim(a, n, nd) for n in ("stride", "padding", "dilation"))
        consts = {}
        for j, d in enumerate(dims):
            consts.update({f"STRIDE_{d}": stride[j], f"PAD_{d}": pad[j], f"DIL_{d}": dil[j]})
        if transposed:
            consts["GROUPS"] = groups
            for j, d in enumerate(dims):
                step = stride[j] // math.gcd(stride[j], dil[j])
                dstep = dil[j] // math.gcd(stride[j], dil[j])
                consts.update({f"KS_{d}": ks[j], f"STEP_{d}": step, f"DSTEP_{d}": dstep,
                               f"INV_{d}": pow(dstep, -1, step) if step > 1 else 0})
        # a transposed conv's output o takes tap k only where (o + pad - k * dil) % stride == 0: each
        # program runs one phase (o + pad) % stride per dim, its outputs o0 + m * stride and its taps
        # k0 + i * STEP only (sub-pixel decomposition), instead of testing every tap at every output
        taps = tuple(-(-ks[j] // consts[f"STEP_{d}"]) for j, d in enumerate(dims)) if transposed else ks
        outs = tuple(op.shape[2:])
        p_shape = (x_shape[0],) + (tuple((o + s - 1) // s for o, s in zip(outs, stride)) if transposed else outs)
        return cls(transposed, dims, x_shape, groups, x_shape[1] // groups, op.shape[1] // groups, ks, stride,
                   pad, taps, outs, p_shape, consts)

    @property
    def n_p(self) -> int:
        return math.prod(self.p_shape)

    @property
    def red(self) -> int:
        return self.cg * math.prod(self.taps)

    @property
    def p_fast(self) -> bool:
        """Whether the input patch is gathered positions-fastest ([BLOCK_R, BLOCK_P], then transposed
        for tl.dot): neighbouring positions are neighbouring addresses of a row of x, so a warp's loads
        coalesce, where a warp walking (channel, tap) pairs reads a whole plane apart. On an H100 that
        took a conv_transpose3d from 135 to 65 ms and a conv2d from 1.34 to 0.83 ms; with one tap per
        position (1x1 convs, a transposed conv whose stride is its kernel) the reduction runs over
        channels alone, and the transpose cost more than it saved (0.93 -> 2.64 ms, 3.16 -> 5.18 ms)."""
        return math.prod(self.taps) > 1

    @property
    def ng(self) -> int:
        """Grid axis 2: groups, or (phase, group) pairs of a transposed conv."""
        return self.groups * math.prod(self.stride) if self.transposed else self.groups

    @property
    def p(self) -> list[str | None]:
        return coord_names(self.p_shape, "rp", "p")

    @property
    def r(self) -> list[str | None]:
        return coord_names((self.cg,) + self.taps, "rr", "r")


def tiles_for(geo: _Geometry) -> dict:
    """Tile sizes and warps. The gather, not the MMA, bounds these kernels, so the reduction step is
    short (a [BLOCK_R, BLOCK_P] patch of 16 or 32 rows keeps its index arithmetic in registers) and 8
    warps keep more loads in flight; wide outputs (OCG over 64) take 128-channel tiles, so each gathered
    element feeds twice the MMA work. Measured on an H100 over 14 conv-bound bench problems against
    the former 64 x 64 x 64 tiles with 4 warps (bench/candidate_variants_gpu.py): 1.43x geomean per
    problem, 0.79-2.27x; conv_transpose3d with 2 output channels 41 -> 25 ms."""
    # A transposed conv's loop runs to its phase's own tap count (`red_ph`, read at run time). Software-
    # pipelined (Triton 3.6's default of 3 stages) that loop came out wrong on an H200 wherever a phase
    # has no taps (stride and dilation sharing a factor): three problems at 1.0-1.41 relative error, all
    # right under the interpreter. One stage was right on all three and 1.45-2.17x faster
    # (bench/candidate_variants_gpu.py, bench/RESULTS.md).
    stages = {"num_stages": 1} if geo.transposed else {}
    if geo.ocg > 64:
        return {"BLOCK_P": pow2(geo.n_p, 16, 128), "BLOCK_OC": 128, "BLOCK_R": pow2(geo.red, 16, 32), "num_warps": 8,
                **stages}
    return {"BLOCK_P": pow2(geo.n_p, 16, 256), "BLOCK_OC": pow2(geo.ocg, 16, 64), "BLOCK_R": pow2(geo.red, 16, 16),
            "num_warps": 8, **stages}


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
        geo = _Geometry.of(k)
        blocks = tiles_for(geo)
        tiles = cdiv(geo.n_p, blocks["BLOCK_P"]) * cdiv(geo.ocg, blocks["BLOCK_OC"]) * geo.ng
        if worth_splitting(geo.red, tiles, MIN_R_CHUNK):
            return self._split(k, geo, name, fwd, blocks)
        src, launch, _ = self._kernel(k, geo, name, fwd, "whole")
        if _phases_inner(geo):
            grid = f"(triton.cdiv({geo.n_p}, BLOCK_P) * {geo.ng}, triton.cdiv({geo.ocg}, BLOCK_OC))"
            return src, launch.call(name, grid, {**geo.consts, "NG": geo.ng, **blocks})
        return src, launch.call(name, self._grid(geo, str(geo.ng)), {**geo.consts, **blocks})

    @staticmethod
    def _grid(geo: _Geometry, axis2: str) -> str:
        return f"(triton.cdiv({geo.n_p}, BLOCK_P), triton.cdiv({geo.ocg}, BLOCK_OC), {axis2})"

    def _split(self, k: Kernel, geo: _Geometry, name: str, fwd: Forward, blocks: dict) -> tuple[str, list[str]]:
        """Few output tiles, long reduction: each (tile, RED chunk) program stores its partial tile; a
        second kernel adds the SPLIT partials of each tile in order, then the bias and the epilogue."""
        ws = fwd.fresh(f"{k.target.value}_part")
        src1, first, _ = self._kernel(k, geo, part_name(name), fwd, "partial", ws)
        src2, second, consts2 = self._kernel(k, geo, name, fwd, "combine", ws)
        consts = {**geo.consts, "NG": geo.ng, **blocks}
        lines1 = first.call(part_name(name), self._grid(geo, "SPLIT" if geo.ng == 1 else f"{geo.ng} * SPLIT"),
                            consts)
        bp, boc = blocks["BLOCK_P"], blocks["BLOCK_OC"]
        if any(isinstance(v, Sym) for v in (geo.n_p, geo.ocg, bp, boc)):
            tiles = f"triton.cdiv({geo.n_p}, {text(bp, 'BLOCK_P')}) * triton.cdiv({geo.ocg}, {text(boc, 'BLOCK_OC')})" \
                + (f" * {geo.ng}" if geo.ng != 1 else "")
        else:
            tiles = str(cdiv(geo.n_p, bp) * cdiv(geo.ocg, boc) * geo.ng)
        lines = lines1[:-1] + chunk_lines(str(geo.red), text(blocks["BLOCK_R"], "BLOCK_R"), tiles,
                                          min_chunk=MIN_R_CHUNK)
        lines.append(f"{ws} = torch.empty((SPLIT, {geo.ng}, {geo.n_p}, {geo.ocg}), device={first.args[1]}.device, "
                     f"dtype=torch.float32)")
        lines.append(lines1[-1])
        call2 = second.call(name, self._grid(geo, str(geo.ng)), {c: consts[c] for c in consts2})
        lines += [ln for ln in call2 if not ln.startswith("BLOCK_")]  # computed for the first launch
        return src1 + "\n\n" + src2, lines

    def _kernel(self, k: Kernel, geo: _Geometry, name: str, fwd: Forward, stage: str,
                ws: str | None = None) -> tuple[str, Launch, list[str]]:
        """One kernel of the conv: `whole` (reduction and output), `partial` (a RED chunk's partial
        tiles) or `combine` (the partials' sum and the output); returns its source, its launch and its
        constexpr names. Each stage declares only the pointers and sizes it reads."""
        launch = Launch(fwd)
        if ws is not None:
            launch.buffer("part_ptr", ws)
        launch.scalar("P", geo.n_p)
        launch.scalar("OCG", geo.ocg)
        if stage != "combine":
            # a transposed conv's reduction is its phase's (`red_ph`, CG x the phase's taps)
            launch.scalar(*(("CG", geo.cg) if geo.transposed else ("RED", geo.red)))
        if stage != "whole":
            launch.scalar(*(("CHUNK", "CHUNK") if stage == "partial" else ("SPLIT", "SPLIT")))
        ph_lines, base_lines = _phase_lines(geo, launch)
        pre_lines, in_lines, load_x, load_w = self._gather(k, geo, launch) if stage != "combine" else ([], [], "", "")
        bias, epi, value, out, off = self._outputs(k, geo, launch) if stage != "partial" else ([], [], "", "", "")
        if stage == "combine":
            base_lines = []  # the reduction's first tap and input position per phase
        used = "\n".join(ph_lines + base_lines + pre_lines + in_lines + [load_x, load_w] + bias + epi + [off])
        p_lines = coord_lines(geo.p_shape, "rp", "p", launch, used) + ph_lines + base_lines + pre_lines
        r_lines = _tap_lines(geo, used) if geo.transposed else coord_lines((geo.cg,) + geo.taps, "rr", "r", launch, used)
        consts = [c for c in geo.consts if stage != "combine" or re.search(rf"\b{c}\b", used)]
        inner = stage == "whole" and _phases_inner(geo)
        consts += ["NG"] * (stage != "whole" or inner) + ["BLOCK_P", "BLOCK_OC"] + ["BLOCK_R"] * (stage != "combine")
        comment = self.describe(k) if stage != "partial" else f"reduction-chunk partials of {self.describe(k)}"
        src = render("conv.py.j2", name=name, stage=stage, signature=launch.signature(consts), comment=comment,
                     p_fast=geo.p_fast, phases_inner=inner, red="red_ph" if geo.transposed else "RED",
                     exact=k.exact_products,
                     p_lines=p_lines, r_lines=r_lines, in_lines=in_lines, load_x=load_x, load_w=load_w, bias=bias,
                     epilogue=epi, out=out, out_off=off, value=value)
        return src, launch, consts

    def _gather(self, k: Kernel, geo: _Geometry, launch: Launch) -> tuple[list[str], list[str], str, str]:
        """Lines before the reduction loop (the positions' part of each input coordinate and of the
        x offset), the reduction step's lines (the taps' part, the mask), and the loads of the input
        patch and the weights.

        Each input coordinate is a position part plus a tap part (in = o * STRIDE - PAD + k * DIL, or a
        transposed conv's base + o - k * DSTEP), so the x offset is x_p[positions] + x_r[taps]: one add
        per element of the [BLOCK_R, BLOCK_P] patch, the position part computed once per program. Only
        the bounds of padded (or transposed) dims are tested per element, one unsigned compare each
        (`in_bounds`). Written out per element, the index arithmetic bounded a conv_transpose3d with
        two output channels on an H100 (65 ms against eager's 5.5 ms)."""
        p, r, dims, transposed = geo.p, geo.r, geo.dims, geo.transposed
        # the x tile's axes: [BLOCK_R, BLOCK_P] when positions are its fast dim, else [BLOCK_P, BLOCK_R]
        xp, xr = ("[None, :]", "[:, None]") if geo.p_fast else ("[:, None]", "[None, :]")
        pre, in_lines, in_mask = [], [], [f"p_mask{xp}", f"r_mask{xr}"]
        tap_lines: list[str] = []
        p_in: list[str | None] = []
        r_in: list[str | None] = []
        for j, d in enumerate(dims):
            low, pj, rj = d.lower(), p[1 + j], r[1 + j]
            size = launch.scalar(f"IN_{d}", geo.x_shape[2 + j])
            if transposed:
                tap_lines.append(f"k_{low} = k0_{low}" + (f" + {rj} * STEP_{d}" if rj else ""))
                pp, rr, bounded = f"base_{low}" + (f" + {pj}" if pj else ""), (f"-{rj} * DSTEP_{d}" if rj else None), True
            else:
                pp = " - ".join(t for t in (f"{pj} * STRIDE_{d}" if pj else None, f"PAD_{d}" if geo.pad[j] else None) if t)
                pp = pp if not pp.startswith("PAD") else f"-{pp}"
                rr, bounded = (f"{rj} * DIL_{d}" if rj else None), bool(geo.pad[j])
            if pp:
                pre.append(f"pin_{low} = {pp}")
            if rr:
                in_lines.append(f"rin_{low} = {rr}")
            p_in.append(f"pin_{low}" if pp else None)
            r_in.append(f"rin_{low}" if rr else None)
            if bounded:
                parts = [t for t in (f"pin_{low}" + (xp if pj else "") if pp else None,
                                     f"rin_{low}{xr}" if rr else None) if t]
                in_lines.append(f"in_{low} = {' + '.join(parts) or '0'}")
                in_mask.append(in_bounds(f"in_{low}", size))
        if transposed:
            in_lines = tap_lines + in_lines
        in_lines.append("in_mask = " + " & ".join(in_mask))
        groups, cg = geo.groups, geo.cg
        if groups > 1:
            launch.scalar("CG", cg)
        # the input channel of each reduction lane (g * CG + c within the group)
        if r[0]:
            c_in = f"(g * CG + {r[0]})" if groups > 1 else r[0]
        else:
            c_in = ("g * CG" if cg > 1 else "g") if groups > 1 else None
        w_c = col(c_in, "[:, None]")
        x = k.operands["x"].expr
        name = launch.pointer(x.leaf)
        x_p = launch.offset(x.leaf, [p[0], None] + p_in)
        x_r = launch.offset(x.leaf, [None, c_in] + r_in)
        # a part with no index of its own (one position, or one channel and tap) is a scalar: widen it
        p_vec = p[0] is not None or any(p[1 + j] for j in range(len(dims)))
        r_vec = r[0] is not None or any(r[1 + j] for j in range(len(dims)))
        pre.append(f"x_p = {x_p}" + ("" if p_vec else " + tl.zeros([BLOCK_P], dtype=tl.int32)"))
        in_lines.append(f"x_r = {x_r}" + ("" if r_vec else " + tl.zeros([BLOCK_R], dtype=tl.int32)"))
        up = ".to(tl.float32)" if x.leaf.dtype in ("bf16", "f16") else ""
        load_x = f"xv = tl.load({name}_ptr + x_p{xp} + x_r{xr}, mask=in_mask, other=0.0){up}"
        if transposed:
            w_taps = [f"k_{d.lower()}" + ("[:, None]" if r[1 + j] else "") for j, d in enumerate(dims)]
            w_coords = [w_c, "roc[None, :]"] + w_taps
        else:
            oc = "(g * OCG + roc)" if groups > 1 else "roc"
            w_coords = [f"{oc}[None, :]", col(r[0], "[:, None]")] + [col(r[1 + j], "[:, None]") for j in range(len(dims))]
        w_mask = "r_mask[:, None] & oc_mask[None, :]"
        load_w, _ = operand_lines(launch, k.operands["w"].expr, w_coords, w_mask,
                                  other="0.0", var="wv", exact=True, full="(BLOCK_R, BLOCK_OC)")
        return pre, in_lines, load_x, load_w[0]

    def _outputs(self, k: Kernel, geo: _Geometry, launch: Launch) -> tuple[list[str], list[str], str, str, str]:
        """The bias and epilogue lines over the finished tile, and the store's target and offset."""
        oc = "(g * OCG + roc)" if geo.groups > 1 else "roc"
        o_coords = [f"o_{d.lower()}[:, None]" for d in geo.dims] if geo.transposed else \
            [col(geo.p[1 + j], "[:, None]") for j in range(len(geo.dims))]
        out_coords = [col(geo.p[0], "[:, None]"), f"{oc}[None, :]"] + o_coords
        bias: list[str] = []
        if "bias" in k.operands:
            body, res = operand_lines(launch, k.operands["bias"].expr, out_coords, "mask", other="0.0",
                                      full="(BLOCK_P, BLOCK_OC)")
            bias = body + [f"acc += {res}"]
        epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full="(BLOCK_P, BLOCK_OC)")
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, None, "(BLOCK_P, BLOCK_OC)")
        return bias, epi, value, out, off


def _phases_inner(geo: _Geometry) -> bool:
    """Whether a transposed conv's programs run its phases fastest (grid axis 0 over (p-tile, phase)
    pairs). Its outputs are interleaved: a phase stores every STRIDE-th position of each row, so one
    phase's program fills a fraction of each 32-byte sector it writes; with the phases on grid axis 2
    each phase made a pass over the whole output before the next (seed 808's conv_transpose2d, stride
    (2, 5), 470 MB of output in 10 phases: 12.4 ms on an H200 against eager's 2.15, and seed 909's
    conv_transpose1d, stride 5, 0.47x). Not yet timed on a GPU: the rows are listed in bench/RESULTS.md."""
    return geo.transposed and math.prod(geo.stride) > 1


def _phase_lines(geo: _Geometry, launch: Launch) -> tuple[list[str], list[str]]:
    """A transposed conv's output phase and output coordinates (every stage stores or gathers by them),
    and the phase's first tap and input position (the reduction's). None for a plain conv."""
    if not geo.transposed:
        return [], []
    out = ["ph = g // GROUPS  # axis 2 runs over (phase, group) pairs", "g = g % GROUPS"]
    first = []
    p = geo.p
    for j, d in enumerate(geo.dims):
        low = d.lower()
        gcd = geo.stride[j] // geo.consts[f"STEP_{d}"]
        inner = "".join(f" // STRIDE_{e}" for e in geo.dims[j + 1:])
        out += [f"phi_{low} = ph{inner} % STRIDE_{d}",
                f"o0_{low} = (phi_{low} + STRIDE_{d} - PAD_{d} % STRIDE_{d}) % STRIDE_{d}",
                f"o_{low} = o0_{low} + {p[1 + j] or '0 * rp'} * STRIDE_{d}",
                f"p_mask = p_mask & (o_{low} < {launch.scalar(f'OUT_{d}', geo.outs[j])})"]
        # the phase's taps along d: k0 + i * STEP below KS, none unless gcd divides the phase
        nt = f"(KS_{d} - k0_{low} + STEP_{d} - 1) // STEP_{d}"
        first += [f"k0_{low} = (phi_{low} // {gcd}) * INV_{d} % STEP_{d}",
                  f"base_{low} = (o0_{low} + PAD_{d} - k0_{low} * DIL_{d}) // STRIDE_{d}",
                  f"nt_{low} = " + (f"tl.where(phi_{low} % {gcd} == 0, {nt}, 0)" if gcd > 1 else nt)]
    first.append("red_ph = CG * " + " * ".join(f"nt_{d.lower()}" for d in geo.dims)
                 + "  # this phase's (channel, tap) pairs: 0 where no tap reaches its outputs")
    return out, first


def _tap_lines(geo: _Geometry, used: str) -> list[str]:
    """A transposed conv's reduction coordinates (channel, then one per dim), decomposed from `rr` by
    the phase's own tap counts `nt_<dim>`: the loop walks only taps that reach the phase's outputs.
    Walking the widest phase's ceil(KS / STEP) taps in every phase and masking the rest, the
    conv_transpose3d(38 -> 3, (5, 7, 1), stride (2, 2, 3), dilation (1, 2, 2)) of L2-03a65e86d ran
    600 BLOCK_R steps per tile over its 12 phases where 84 carry a tap (46 ms against eager's 1.8)."""
    shape = (geo.cg,) + geo.taps
    sizes = ["CG"] + [f"nt_{d.lower()}" for d in geo.dims]
    dims = [d for d, s in enumerate(shape) if not is_unit(s)]
    if len(dims) < 2:
        return []
    need = {d for d in dims if re.search(rf"\br{d}\b", used)}
    lines, rest = [], "rr"
    for j, d in enumerate(reversed(dims)):
        if not need:
            break
        if j == len(dims) - 1:
            lines.append(f"r{d} = {rest}")
            break
        if d in need:
            lines.append(f"r{d} = {rest} % {sizes[d]}")
            need.discard(d)
        if need:
            lines.append(f"r_rest = {rest} // {sizes[d]}")
            rest = "r_rest"
    return lines


FAMILIES = (Conv(),)
