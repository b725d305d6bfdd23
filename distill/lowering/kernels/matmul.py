"""Matrix products: matmul, bmm, matmul4d, linear, addmm and the einsum patterns.

The outer product einsum("i,j->ij") is not one: it is a pointwise multiply (data/lowering/ops.toml).

Their tile forms and helpers are shared with kernels/attention.py and kernels/gemv.py.

All products are seen as batched `[B0, B1, M, K] @ [B0, B1, K, N]` through views in forward
(`unsqueeze` adds batch dims, `weight.t()` feeds nn.Linear's weight); a bias (Linear's, or addmm's
input) is an operand over the output, added before the epilogue.

Two kernel forms. Matrices that fill a tile get 2-D tiles: one program per output tile of one
matrix, a scalar batch index, a 2-D `tl.dot`, which Hopper runs as wgmma (sm_90 TTGIR:
`warp_group_dot`) fed by pipelined loads. Matrices too small for that share a program, BLOCK_B of
them in 3-D tiles and a batched `tl.dot`, which compiles to the older mma.sync with poor layouts:
on an H100 a (32, 2048, 1448) @ (32, 1448, 64) bmm took 3.99 ms that way, eager 0.263 ms. The form
is chosen from the problem's sizes; the tiles are computed in forward from the sizes it reads, so
either form is correct at any size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from distill.lowering import exprs, views
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, operand_lines, pow2, render,
                                           store_offset)
from distill.lowering.kernels import tf32split
from distill.lowering.kernels.split import cdiv, chunk_lines, part_name, text, worth_splitting
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit, smax, smin, sprod
from distill.lowering.views import Step

# K elements per program, at least, when K is split (32 BLOCK_K steps of 16): enough work per
# program to hide the partial tile's store and the combining kernel
MIN_K_CHUNK = 512
# 2-D tiles: up to 128 x 128 outputs, K 32 at a time, three stages of loads in flight. fp32
# operands take (128 + 128) * 32 * 4 = 32 KiB a stage; compiled for sm_90 the 128 x 128 kernel
# takes 96 KiB of shared memory, well under the H100's 227 KiB per block.
TILE_MAX, K_STEP, STAGES, GROUP_M = 128, 32, 3, 8


@dataclass(frozen=True)
class TileForm:
    """How a kernel indexes its tiles: 3-D `[BLOCK_B, rows, cols]` when BLOCK_B matrices share a
    program (`guard` masks the batch edge), else 2-D `[rows, cols]` with a scalar batch index."""

    batched: bool
    guard: str = "(rb[:, None, None] < BATCH)"

    def b(self, c: str | None) -> str | None:
        return None if c is None else (f"{c}[:, None, None]" if self.batched else c)

    def row(self, r: str) -> str:
        return f"{r}[None, :, None]" if self.batched else f"{r}[:, None]"

    def col(self, c: str) -> str:
        return f"{c}[None, None, :]" if self.batched else f"{c}[None, :]"

    def coords(self, c0: str | None, c1: str | None, rows: str, cols: str) -> list[str | None]:
        return [self.b(c0), self.b(c1), self.row(rows), self.col(cols)]

    def mask(self, rows: str, rsize: str, cols: str, csize: str) -> str:
        m = f"({self.row(rows)} < {rsize}) & ({self.col(cols)} < {csize})"
        return f"{self.guard} & {m}" if self.batched else m

    def full(self, rows: str, cols: str) -> str:
        return f"(BLOCK_B, {rows}, {cols})" if self.batched else f"({rows}, {cols})"


def _lift(steps: list[Step], shape: tuple[int, ...], on: str) -> tuple[list[Step], tuple[int, ...]]:
    """Prepend size-1 batch dims until the view is 4-D."""
    shape, _ = views.apply(shape, steps) if steps else (shape, None)
    steps = list(steps) + [Step("unsqueeze", (0,), on)] * (4 - len(shape))
    return steps, (1,) * (4 - len(shape)) + tuple(shape)


def batch_lines(launch: Launch, b0: int, b1: int, batch_param: bool) -> tuple[list[str], str | None, str | None]:
    """Coordinates of the program's batch index `rb` in the two batch dims (None when size 1)."""
    if batch_param:
        launch.scalar("BATCH", b0 * b1)
    if not is_unit(b0) and not is_unit(b1):
        size = launch.scalar("B1", b1)
        return [f"b0 = rb // {size}", f"b1 = rb % {size}"], "b0", "b1"
    return [], ("rb" if not is_unit(b0) else None), ("rb" if not is_unit(b1) else None)


def batch_block(batch: int, tile: int, budget: int) -> int:
    """Matrices per program: as many as fit `budget` elements of tile (a power of two, as `tile` is)."""
    return smax(1, smin(pow2(batch), budget // tile))


def named(x: int, name: str) -> int:
    """A tile forward computes (a Sym) as the variable forward holds it in; a literal stays one."""
    return Sym(int(x), name) if isinstance(x, Sym) else x


def pick(x: int, limit: int, small: int, large: int) -> int:
    """`small if x <= limit else large`, written so in forward when x is read at run time."""
    value = small if int(x) <= limit else large
    if not isinstance(x, Sym):
        return value
    return Sym(value, f"{small} if {x} <= {limit} else {large}", 0)


def literal(*xs: int) -> bool:
    return not any(isinstance(x, Sym) for x in xs)


def _grid(launch_grid: str, consts: dict) -> str:
    """Forward's count of programs on axis 0, literal tiles written in (for split's chunk lines)."""
    for c, v in consts.items():
        if not isinstance(v, Sym):
            launch_grid = re.sub(rf"\b{c}\b", str(v), launch_grid)
    return launch_grid


class Matmul(Family):
    name = "matmul"
    fused_roles = ("bias",)

    def slot_roles(self, op: Op) -> list[str]:
        return ["bias", "a", "b"] if op.op == "addmm" else ["a", "b"]

    @staticmethod
    def _folds(op: Op) -> bool:
        """Whether the product's batch dims fold into M: one B for every matrix of A (a Linear's weight,
        einsum("bijl,lk->bijk")'s [L, K]), so [..., M, K] @ [K, N] is a single [(... M), K] @ [K, N]
        GEMM. Lowered per matrix, einsum_tensor_matrix with (215, 10, 10, 609) @ (609, 2896) ran 21,500
        rows as 2150 matrices of 10 in 3-D tiles: 4.6 ms on an H100, eager 2.5 ms for its whole program."""
        return op.op == "einsum_tensor_matrix" or (op.op == "linear" and len(op.shape) >= 3)

    @staticmethod
    def _fold_steps(shape: tuple[int, ...], on: str) -> list[Step]:
        return [Step("view", (sprod(shape[:-1]), shape[-1]), on)]

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        roles = dict(zip(self.slot_roles(op), op.inputs))
        out4 = _lift([], op.shape, op.name)[1] if op.op != "mv" else (1, 1, op.shape[0], 1)
        a_shape = prog.values[roles["a"]].shape
        a_steps, a_space = _lift([], a_shape, roles["a"])
        if self._folds(op):
            out4 = (1, 1, sprod(op.shape[:-1]), op.shape[-1])
            a_steps, a_space = _lift(self._fold_steps(a_shape, roles["a"]), a_shape, roles["a"])
        specs = [OperandSpec("a", roles["a"], tuple(a_steps), a_space)]
        if op.op == "linear":
            w = op.params["weight"]
            b_steps, b_space = _lift([Step("t", (), op.name)], w.shape, op.name)
            specs.append(OperandSpec("b", "weight", tuple(b_steps), b_space))
        elif op.op == "mv":
            b_steps, b_space = _lift([Step("unsqueeze", (-1,), roles["b"])], prog.values[roles["b"]].shape, roles["b"])
            specs.append(OperandSpec("b", roles["b"], tuple(b_steps), b_space))
        else:
            b_steps, b_space = _lift([], prog.values[roles["b"]].shape, roles["b"])
            specs.append(OperandSpec("b", roles["b"], tuple(b_steps), b_space))
        if op.op == "linear" and "bias" in op.params:  # nn.Linear(..., bias=False) has none
            steps = views.along(len(op.shape) - 1, op.shape[-1], op.shape, op.name)
            if self._folds(op):
                steps = views.along(1, op.shape[-1], (sprod(op.shape[:-1]), op.shape[-1]), op.name)
            specs.append(OperandSpec("bias", "bias", tuple(_lift(steps, op.params["bias"].shape, op.name)[0]), out4))
        elif op.op == "addmm":
            src = roles["bias"]
            steps = views.broadcast(prog.values[src].shape, op.shape, src)
            specs.append(OperandSpec("bias", src, tuple(_lift(steps, prog.values[src].shape, src)[0]), out4))
        return specs

    def out_steps(self, op: Op) -> list[Step]:
        steps = [Step("unsqueeze", (-1,), op.name)] if op.op == "mv" else []
        if self._folds(op):
            steps = self._fold_steps(op.shape, op.name)
        return _lift(steps, op.shape, op.name)[0]

    def describe(self, k: Kernel) -> str:
        ops = k.operands
        what = f"{k.op.op}({exprs.describe(ops['a'].expr)}, {exprs.describe(ops['b'].expr)})"
        if "bias" in ops:
            what += f" + {exprs.describe(ops['bias'].expr)}"
        return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"

    @staticmethod
    def tiles(b0: int, b1: int, m: int, n: int, kk: int) -> tuple[TileForm, dict, str, int]:
        """The kernel form, its constants (constexprs, then launch options), forward's grid and the
        number of programs at this problem's sizes. 3-D when output tiles of up to 64 x 64 leave room
        for two matrices or more in 4096 elements; else 2-D, up to 128 x 128."""
        batch = b0 * b1
        bm, bn = pow2(m, 16, 64), pow2(n, 16, 64)
        bb = batch_block(batch, named(bm, "BLOCK_M") * named(bn, "BLOCK_N"), 4096)
        if int(bb) > 1:
            consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": pow2(kk, 16, 32), "BLOCK_B": bb}
            grid = f"(triton.cdiv({m}, BLOCK_M) * triton.cdiv({n}, BLOCK_N) * triton.cdiv({batch}, BLOCK_B),)"
            return TileForm(True), consts, grid, cdiv(m, bm) * cdiv(n, bn) * cdiv(batch, bb)
        bm, bn = pow2(m, 16, TILE_MAX), pow2(n, 16, TILE_MAX)
        # 8 warps from 128 x 64 up: tf32x3 holds each A tile twice (its TF32 high and low parts), and
        # compiled for sm_90 a 128 x 64 tile took 255 registers and spilled at 4 warps, 174 at 8
        warps = pick(named(bm, "BLOCK_M") * named(bn, "BLOCK_N"), TILE_MAX * TILE_MAX // 4, 4, 8)
        consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": pow2(kk, 16, K_STEP), "GROUP_M": GROUP_M,
                  "num_warps": warps, "num_stages": STAGES}
        per_batch = "" if is_unit(batch) else f" * {batch}"
        grid = f"(triton.cdiv({m}, BLOCK_M) * triton.cdiv({n}, BLOCK_N){per_batch},)"
        return TileForm(False), consts, grid, cdiv(m, bm) * cdiv(n, bn) * int(batch)

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        a, b = k.operands["a"], k.operands["b"]
        b0, b1, m, kk = a.space
        n = b.space[3]
        form, consts, grid, programs = self.tiles(b0, b1, m, n, kk)
        if worth_splitting(kk, programs, MIN_K_CHUNK):
            return self._split_k(k, name, fwd, form, consts, grid, programs)
        launch = Launch(fwd)
        split, consts, grid, pre_src, pre_lines = self._b_parts(k, name, fwd, launch, form, consts, grid)
        split_b = split is not None
        launch.scalar("M", m)
        launch.scalar("N", n)
        launch.scalar("K", kk)
        batch = batch_lines(launch, b0, b1, form.batched)
        load_a, load_b = self._loads(k, launch, form, batch, split)
        bias, epi, value, out, off = self._outputs(k, launch, form, batch)
        src = render("matmul.py.j2", name=name, signature=launch.signature(constexprs(consts)), batched=form.batched,
                     comment=self.describe(k), batch_lines=batch[0], load_a=load_a, load_b=load_b, bias=bias,
                     epilogue=epi, out=out, out_off=off, value=value, stage="whole", split_b=split_b)
        return (pre_src + "\n\n" if pre_src else "") + src, pre_lines + launch.call(name, grid, consts)

    @staticmethod
    def _b_parts(k: Kernel, name: str, fwd: Forward, launch: Launch, form: TileForm, consts: dict,
                 grid: str) -> tuple[tuple[bool, bool] | None, dict, str, str, list[str]]:
        """B split once into TF32 parts (kernels/tf32split.py) when A has MIN_ROWS rows or more and the form is
        2-D: whether B varies along each batch dim (None: not split), the tiles and grid of the three-product
        loop, and the split kernel's source and forward lines; the parts become `launch`'s b_hi/b_lo buffers."""
        a, b = k.operands["a"], k.operands["b"]
        b0, b1, m, _ = a.space
        n = b.space[3]
        varies = tf32split.batch_varies(b.expr)
        if form.batched or not tf32split.worth_splitting(m, b.space, varies):
            return None, consts, grid, "", []
        # 128 x 64 tiles: on an H100 the three-product loop ran 5-20% faster so than at 128 x 128
        # (bench/matmul_precision_gpu.py), and 8% (a bmm 2048x1448x64) to 19% (a bmm 1448x6889x2896)
        # faster at 8 warps than at 4 (bench/candidate_variants_gpu.py)
        consts = {**consts, "BLOCK_N": pow2(n, 16, TILE_MAX // 2), "num_warps": 8}
        grid = f"(triton.cdiv({m}, BLOCK_M) * triton.cdiv({n}, BLOCK_N){'' if is_unit(b0 * b1) else f' * {b0 * b1}'},)"
        pre_src, pre_lines, hi, lo = tf32split.emit_split(b.expr, tf32split.split_shape(b.space, varies),
                                                          name[: -len("_kernel")], fwd)
        launch.buffer("b_hi_ptr", hi)
        launch.buffer("b_lo_ptr", lo)
        return varies, consts, grid, pre_src, pre_lines

    def _loads(self, k: Kernel, launch: Launch, form: TileForm, batch: tuple,
               split: tuple[bool, bool] | None = None) -> tuple[str, str]:
        """The K step's loads of A and B; with `split` (whether B varies along each batch dim), B's
        TF32 parts from the dense [B0', B1', K, N] tensors the split kernel wrote."""
        a, b = k.operands["a"], k.operands["b"]
        _, c0, c1 = batch
        load_a, _ = operand_lines(launch, a.expr, form.coords(c0, c1, "rm", "rk"), form.mask("rm", "M", "rk", "K"),
                                  other="0.0", var="a", exact=True, full=form.full("BLOCK_M", "BLOCK_K"))
        if split:
            index = "rb" if all(split) else (c0 if split[0] else c1 if split[1] else None)
            off = (f"{index} * K * N + " if index else "") + "rk[:, None] * N + rn[None, :]"
            mask = form.mask("rk", "K", "rn", "N")
            return load_a[0], "\n        ".join(f"b_{part} = tl.load(b_{part}_ptr + {off}, mask={mask}, other=0.0)"
                                                for part in ("hi", "lo"))
        load_b, _ = operand_lines(launch, b.expr, form.coords(c0, c1, "rk", "rn"), form.mask("rk", "K", "rn", "N"),
                                  other="0.0", var="b", exact=True, full=form.full("BLOCK_K", "BLOCK_N"))
        return load_a[0], load_b[0]

    def _outputs(self, k: Kernel, launch: Launch, form: TileForm, batch: tuple) -> tuple[list[str], list[str], str, str, str]:
        _, c0, c1 = batch
        out_coords = form.coords(c0, c1, "rm", "rn")
        full = form.full("BLOCK_M", "BLOCK_N")
        bias: list[str] = []
        if "bias" in k.operands:
            body, res = operand_lines(launch, k.operands["bias"].expr, out_coords, "mask", other="0.0", full=full)
            bias = body + [f"acc += {res}"]
        epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full=full)
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, None, full)
        return bias, epi, value, out, off

    def _split_k(self, k: Kernel, name: str, fwd: Forward, form: TileForm, consts: dict, grid: str,
                 programs: int) -> tuple[str, list[str]]:
        """Few output tiles, long K: each (tile, K chunk) program stores its partial tile; a second
        kernel adds the SPLIT partials of each tile in order, then the bias and the epilogue."""
        a, b = k.operands["a"], k.operands["b"]
        b0, b1, m, kk = a.space
        n = b.space[3]
        ws = fwd.fresh(f"{k.target.value}_part")
        first = Launch(fwd)
        first.buffer("part_ptr", ws)
        # B split into TF32 parts once, as the unsplit GEMM does from MIN_ROWS rows: tf32x3 in the K loop
        # made a (1218 x 55109) @ (55109 x 724) matmul 6.84 ms against 1.05 ms for one TF32 product and
        # 2.14 ms for eager's cuBLAS (H200, bench/lowering_runs/2026-11-29c_h200_variants.jsonl)
        split, consts, grid, pre_src, pre_lines = self._b_parts(k, name, fwd, first, form, consts, grid)
        split_b = split is not None
        if split_b:
            programs = cdiv(m, consts["BLOCK_M"]) * cdiv(n, consts["BLOCK_N"]) * int(b0 * b1)
        for s, v in (("M", m), ("N", n), ("K", kk), ("CHUNK", "CHUNK")):
            first.scalar(s, v)
        batch = batch_lines(first, b0, b1, True)
        load_a, load_b = self._loads(k, first, form, batch, split)
        src1 = render("matmul.py.j2", name=part_name(name), signature=first.signature(constexprs(consts)),
                      batched=form.batched, comment=f"K-chunk partials of {self.describe(k)}", batch_lines=batch[0],
                      load_a=load_a, load_b=load_b, bias=[], epilogue=[], out="", out_off="", value="", stage="partial",
                      split_b=split_b)
        second = Launch(fwd)
        second.buffer("part_ptr", ws)
        for s, v in (("M", m), ("N", n), ("SPLIT", "SPLIT")):
            second.scalar(s, v)
        batch2 = batch_lines(second, b0, b1, True)
        bias, epi, value, out, off = self._outputs(k, second, form, batch2)
        # the combining kernel has no K loop (no K step, no loads to pipeline) and no operand to reuse
        consts2 = {c: v for c, v in consts.items() if c not in ("BLOCK_K", "GROUP_M", "num_stages")}
        src2 = render("matmul.py.j2", name=name, signature=second.signature(constexprs(consts2)),
                      batched=form.batched, comment=self.describe(k), batch_lines=batch2[0], load_a="", load_b="",
                      bias=bias, epilogue=epi, out=out, out_off=off, value=value, stage="combine", split_b=False)
        lines1 = first.call(part_name(name), grid[:-2] + ", SPLIT)", consts)
        tiles = str(programs) if literal(m, n, b0, b1, *consts.values()) else _grid(grid[1:-2], consts)
        lines = pre_lines + lines1[:-1] + chunk_lines(str(kk), text(consts["BLOCK_K"], "BLOCK_K"), tiles,
                                                      min_chunk=MIN_K_CHUNK)
        lines.append(f"{ws} = torch.empty((SPLIT, {b0 * b1}, {m}, {n}), device={first.args[1]}.device, "
                     f"dtype=torch.float32)")
        lines.append(lines1[-1])
        lines.append(second.call(name, grid, consts2)[-1])  # its computed tiles are the first kernel's
        return (pre_src + "\n\n" if pre_src else "") + src1 + "\n\n" + src2, lines


def constexprs(consts: dict) -> list[str]:
    """The kernel's constexpr parameters: the upper-case constants (num_warps, num_stages are launch options)."""
    return [c for c in ("BLOCK_B", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "BLOCK_L", "BLOCK_S", "BLOCK_E",
                        "BLOCK_V", "E_CHUNKED") if c in consts]


FAMILIES = (Matmul(),)
