"""Matrix products (matmul, bmm, matmul4d, linear, addmm, mv, the einsum patterns) and scaled dot-product attention.

All products are seen as batched `[B0, B1, M, K] @ [B0, B1, K, N]` through views in forward
(`unsqueeze` adds batch dims, `weight.t()` feeds nn.Linear's weight); a bias (Linear's, or addmm's
input) is an operand over the output, added before the epilogue.
"""
from __future__ import annotations

import math

from distill.lowering import exprs, views
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, operand_lines, pow2, render,
                                           store_offset)
from distill.lowering.kernels.split import cdiv, chunk_lines, part_name, text, worth_splitting
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit
from distill.lowering.views import Step


# K elements per program, at least, when K is split (32 BLOCK_K steps of 16): enough work per
# program to hide the partial tile's store and the combining kernel
MIN_K_CHUNK = 512


def _lift(steps: list[Step], shape: tuple[int, ...], on: str) -> tuple[list[Step], tuple[int, ...]]:
    """Prepend size-1 batch dims until the view is 4-D."""
    shape, _ = views.apply(shape, steps) if steps else (shape, None)
    steps = list(steps) + [Step("unsqueeze", (0,), on)] * (4 - len(shape))
    return steps, (1,) * (4 - len(shape)) + tuple(shape)


def _batch_lines(launch: Launch, b0: int, b1: int) -> tuple[list[str], str | None, str | None]:
    """Coordinates of the program's batch block `rb` in the two batch dims (None when size 1)."""
    launch.scalar("BATCH", b0 * b1)
    if not is_unit(b0) and not is_unit(b1):
        size = launch.scalar("B1", b1)
        return [f"b0 = rb // {size}", f"b1 = rb % {size}"], "b0", "b1"
    return [], ("rb" if not is_unit(b0) else None), ("rb" if not is_unit(b1) else None)


def _b(c: str | None) -> str | None:
    return None if c is None else f"{c}[:, None, None]"


def _batch_block(batch: int, tile: int, budget: int) -> int:
    """Matrices per program: as many as fit `budget` elements of output tile."""
    return max(1, min(pow2(batch), budget // tile))


class Matmul(Family):
    name = "matmul"
    fused_roles = ("bias",)

    def slot_roles(self, op: Op) -> list[str]:
        return ["bias", "a", "b"] if op.op == "addmm" else ["a", "b"]

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        roles = dict(zip(self.slot_roles(op), op.inputs))
        out4 = _lift([], op.shape, op.name)[1] if op.op != "mv" else (1, 1, op.shape[0], 1)
        a_shape = prog.values[roles["a"]].shape
        a_steps, a_space = _lift([], a_shape, roles["a"])
        specs = [OperandSpec("a", roles["a"], tuple(a_steps), a_space)]
        if op.op == "linear":
            w = op.params["weight"]
            b_steps, b_space = _lift([Step("t", (), op.name)], w.shape, op.name)
            specs.append(OperandSpec("b", "weight", tuple(b_steps), b_space))
        elif op.op == "mv":
            b_steps, b_space = _lift([Step("unsqueeze", (-1,), roles["b"])], prog.values[roles["b"]].shape, roles["b"])
            specs.append(OperandSpec("b", roles["b"], tuple(b_steps), b_space))
        elif op.op == "einsum_outer":  # i,j->ij: a [M, 1] @ [1, N] product
            a_steps, a_space = _lift([Step("unsqueeze", (-1,), roles["a"])], a_shape, roles["a"])
            specs[0] = OperandSpec("a", roles["a"], tuple(a_steps), a_space)
            b_steps, b_space = _lift([Step("unsqueeze", (0,), roles["b"])], prog.values[roles["b"]].shape, roles["b"])
            specs.append(OperandSpec("b", roles["b"], tuple(b_steps), b_space))
        else:
            b_steps, b_space = _lift([], prog.values[roles["b"]].shape, roles["b"])
            specs.append(OperandSpec("b", roles["b"], tuple(b_steps), b_space))
        if op.op == "linear" and "bias" in op.params:  # nn.Linear(..., bias=False) has none
            steps = views.along(len(op.shape) - 1, op.shape[-1], op.shape, op.name)
            specs.append(OperandSpec("bias", "bias", tuple(_lift(steps, op.params["bias"].shape, op.name)[0]), out4))
        elif op.op == "addmm":
            src = roles["bias"]
            steps = views.broadcast(prog.values[src].shape, op.shape, src)
            specs.append(OperandSpec("bias", src, tuple(_lift(steps, prog.values[src].shape, src)[0]), out4))
        return specs

    def out_steps(self, op: Op) -> list[Step]:
        steps = [Step("unsqueeze", (-1,), op.name)] if op.op == "mv" else []
        return _lift(steps, op.shape, op.name)[0]

    def describe(self, k: Kernel) -> str:
        ops = k.operands
        what = f"{k.op.op}({exprs.describe(ops['a'].expr)}, {exprs.describe(ops['b'].expr)})"
        if "bias" in ops:
            what += f" + {exprs.describe(ops['bias'].expr)}"
        return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        a, b = k.operands["a"], k.operands["b"]
        b0, b1, m, kk = a.space
        n = b.space[3]
        bm, bn, bk = (pow2(m, 16, 64), pow2(m, 16, 128)), (pow2(n, 16, 64), pow2(n, 16, 128)), \
            (pow2(kk, 16, 32), pow2(kk, 16, 128))
        bb = (_batch_block(b0 * b1, bm[0] * bn[0], 4096), _batch_block(b0 * b1, bm[1] * bn[1], 65536))
        consts = {"BLOCK_B": bb, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
        grid = f"(triton.cdiv({m}, BLOCK_M) * triton.cdiv({n}, BLOCK_N) * triton.cdiv({b0 * b1}, BLOCK_B),)"
        tiles = cdiv(m, bm[0]) * cdiv(n, bn[0]) * cdiv(b0 * b1, bb[0])
        if worth_splitting(kk, tiles, MIN_K_CHUNK):
            return self._split_k(k, name, fwd, consts, grid)
        launch = Launch(fwd)
        launch.scalar("M", m)
        launch.scalar("N", n)
        launch.scalar("K", kk)
        batch, load_a, load_b = self._loads(k, launch)
        bias, epi, value, out, off = self._outputs(k, launch, batch)
        src = render("matmul.py.j2", name=name,
                     signature=launch.signature(["BLOCK_B", "BLOCK_M", "BLOCK_N", "BLOCK_K"]),
                     comment=self.describe(k), batch_lines=batch[0], load_a=load_a, load_b=load_b, bias=bias,
                     epilogue=epi, out=out, out_off=off, value=value, stage="whole")
        return src, launch.call(name, grid, consts)

    def _loads(self, k: Kernel, launch: Launch) -> tuple[tuple, str, str]:
        a, b = k.operands["a"], k.operands["b"]
        b0, b1 = a.space[:2]
        batch = _batch_lines(launch, b0, b1)
        _, c0, c1 = batch
        load_a, _ = operand_lines(launch, a.expr, [_b(c0), _b(c1), "rm[None, :, None]", "rk[None, None, :]"],
                                  "(rb[:, None, None] < BATCH) & (rm[None, :, None] < M) & (rk[None, None, :] < K)",
                                  other="0.0", var="a", exact=True, full="(BLOCK_B, BLOCK_M, BLOCK_K)")
        load_b, _ = operand_lines(launch, b.expr, [_b(c0), _b(c1), "rk[None, :, None]", "rn[None, None, :]"],
                                  "(rb[:, None, None] < BATCH) & (rk[None, :, None] < K) & (rn[None, None, :] < N)",
                                  other="0.0", var="b", exact=True, full="(BLOCK_B, BLOCK_K, BLOCK_N)")
        return batch, load_a[0], load_b[0]

    def _outputs(self, k: Kernel, launch: Launch, batch: tuple) -> tuple[list[str], list[str], str, str, str]:
        _, c0, c1 = batch
        out_coords = [_b(c0), _b(c1), "rm[None, :, None]", "rn[None, None, :]"]
        full = "(BLOCK_B, BLOCK_M, BLOCK_N)"
        bias: list[str] = []
        if "bias" in k.operands:
            body, res = operand_lines(launch, k.operands["bias"].expr, out_coords, "mask", other="0.0", full=full)
            bias = body + [f"acc += {res}"]
        epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full=full)
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, None, full)
        return bias, epi, value, out, off

    def _split_k(self, k: Kernel, name: str, fwd: Forward, consts: dict, grid: str) -> tuple[str, list[str]]:
        """Few output tiles, long K: each (tile, K chunk) program stores its partial tile; a second
        kernel adds the SPLIT partials of each tile in order, then the bias and the epilogue."""
        a = k.operands["a"]
        b0, b1, m, kk = a.space
        n = k.operands["b"].space[3]
        ws = fwd.fresh(f"{k.target.value}_part")
        first = Launch(fwd)
        first.params.append("part_ptr")
        first.args.append(ws)
        for s, v in (("M", m), ("N", n), ("K", kk), ("CHUNK", "CHUNK")):
            first.scalar(s, v)
        batch, load_a, load_b = self._loads(k, first)
        src1 = render("matmul.py.j2", name=part_name(name),
                      signature=first.signature(["BLOCK_B", "BLOCK_M", "BLOCK_N", "BLOCK_K"]),
                      comment=f"K-chunk partials of {self.describe(k)}", batch_lines=batch[0], load_a=load_a,
                      load_b=load_b, bias=[], epilogue=[], out="", out_off="", value="", stage="partial")
        second = Launch(fwd)
        second.params.append("part_ptr")
        second.args.append(ws)
        for s, v in (("M", m), ("N", n), ("SPLIT", "SPLIT")):
            second.scalar(s, v)
        batch2 = _batch_lines(second, b0, b1)
        bias, epi, value, out, off = self._outputs(k, second, batch2)
        src2 = render("matmul.py.j2", name=name, signature=second.signature(["BLOCK_B", "BLOCK_M", "BLOCK_N"]),
                      comment=self.describe(k), batch_lines=batch2[0], load_a="", load_b="", bias=bias,
                      epilogue=epi, out=out, out_off=off, value=value, stage="combine")
        lines1 = first.call(part_name(name), grid[:-2] + ", SPLIT)", consts)
        tiles = grid[1:-2]
        for c in ("BLOCK_M", "BLOCK_N", "BLOCK_B"):
            tiles = tiles.replace(c, text(consts[c][0], c))
        lines = lines1[:-1] + chunk_lines(str(kk), text(consts["BLOCK_K"][0], "BLOCK_K"), tiles,
                                          min_chunk=MIN_K_CHUNK)
        lines.append(f"{ws} = torch.empty((SPLIT, {b0 * b1}, {m}, {n}), device={first.args[1]}.device, "
                     f"dtype=torch.float32)")
        lines.append(lines1[-1])
        consts2 = {c: consts[c] for c in ("BLOCK_B", "BLOCK_M", "BLOCK_N")}
        lines += [ln for ln in second.call(name, grid, consts2) if not ln.startswith("BLOCK_")]
        return src1 + "\n\n" + src2, lines


class Attention(Family):
    name = "attention"

    def slot_roles(self, op: Op) -> list[str]:
        return ["q", "k", "v"]

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        return [OperandSpec(r, v, (), prog.values[v].shape) for r, v in zip(self.slot_roles(op), op.inputs)]

    def describe(self, k: Kernel) -> str:
        args = ", ".join(exprs.describe(o.expr) for o in k.operands.values())
        what = f"sdpa({args}, is_causal={k.op.attrs.get('is_causal')})"
        return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        q, kk, v = (k.operands[r] for r in ("q", "k", "v"))
        b, h, seq_l, e = q.space
        seq_s, ev = kk.space[2], v.space[3]
        launch = Launch(fwd)
        for sym, val in (("L", seq_l), ("S", seq_s), ("E", e), ("EV", ev)):
            launch.scalar(sym, val)
        # the 1/sqrt(E) softmax scale follows the head size, so forward computes it
        launch.scalar("scale", f"{e} ** -0.5" if isinstance(e, Sym) else repr(1.0 / math.sqrt(e)))
        batch, c0, c1 = _batch_lines(launch, b, h)
        load_q, _ = operand_lines(launch, q.expr, [_b(c0), _b(c1), "rl[None, :, None]", "re[None, None, :]"],
                                  "b_ok & (rl[None, :, None] < L) & (re[None, None, :] < E)", other="0.0", var="q", exact=True,
                                  full="(BLOCK_B, BLOCK_L, BLOCK_E)")
        load_k, _ = operand_lines(launch, kk.expr, [_b(c0), _b(c1), "rs[None, None, :]", "re[None, :, None]"],
                                  "b_ok & (re[None, :, None] < E) & (rs[None, None, :] < S)", other="0.0", var="kt", exact=True,
                                  full="(BLOCK_B, BLOCK_E, BLOCK_S)")
        load_v, _ = operand_lines(launch, v.expr, [_b(c0), _b(c1), "rs[None, :, None]", "rv[None, None, :]"],
                                  "b_ok & (rs[None, :, None] < S) & (rv[None, None, :] < EV)", other="0.0", var="v", exact=True,
                                  full="(BLOCK_B, BLOCK_S, BLOCK_V)")
        out_coords = [_b(c0), _b(c1), "rl[None, :, None]", "rv[None, None, :]"]
        full = "(BLOCK_B, BLOCK_L, BLOCK_V)"
        epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full=full)
        target = k.target.leaf()
        out = launch.pointer(target, hint="out")
        off = store_offset(launch, target, out_coords, None, full)
        bl, bs = (pow2(seq_l, 16, 64), pow2(seq_l, 16, 128)), (pow2(seq_s, 16, 64), pow2(seq_s, 16, 128))
        be, bv = pow2(e, 16), pow2(ev, 16)
        bb = (_batch_block(b * h, bl[0] * max(bs[0], be, bv), 4096),
              _batch_block(b * h, bl[1] * max(bs[1], be, bv), 65536))
        src = render("attention.py.j2", name=name,
                     signature=launch.signature(["BLOCK_B", "BLOCK_L", "BLOCK_S", "BLOCK_E", "BLOCK_V"]),
                     comment=self.describe(k), batch_lines=batch, load_q=load_q[0], load_k=load_k[0],
                     load_v=load_v[0], causal=bool(k.op.attrs.get("is_causal")),
                     epilogue=epi, out=out, out_off=off, value=value)
        grid = f"(triton.cdiv({seq_l}, BLOCK_L) * triton.cdiv({b * h}, BLOCK_B),)"
        return src, launch.call(name, grid, {"BLOCK_B": bb, "BLOCK_L": bl, "BLOCK_S": bs, "BLOCK_E": be,
                                             "BLOCK_V": bv})


FAMILIES = (Matmul(), Attention())
