"""torch.mv as a row reduction: y[m] = sum_k A[m, k] x[k], fp32 FMAs, the epilogue fused.

The matmul family saw mv as [M, K] @ [K, 1]: a tl.dot whose N = 1 is padded to a 16-wide tile, so
15 of 16 tensor-core lanes did nothing, and a long K over few rows ran on tiny split-K tiles. On an H100
mv of a (1, 23726569) matrix took 1.52 ms, where reading its two 95 MB operands takes 0.063. Here a
program takes BLOCK_M rows and walks K BLOCK_K at a time, accumulating A * x in a [BLOCK_M, BLOCK_K]
fp32 tile that is summed once at the end (fp32 FMAs, as eager's fp32 GEMV: no tensor cores, no TF32).
Few long rows split K as the row reductions do (kernels/split.py): one program per (row block, chunk)
stores its partial sums, a second kernel adds them in a fixed order, then the epilogue.
"""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.kernels.base import Forward, Launch, operand_lines, pow2, render, store_offset
from distill.lowering.kernels.matmul import Matmul
from distill.lowering.kernels.split import chunk_lines, part_name, row_blocks, text, worth_splitting
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, smax, smin

TILE = 4096  # elements of a [BLOCK_M, BLOCK_K] tile


class Gemv(Matmul):
    """torch.mv: the matmul family's operands and output views ([1, 1, M, K] @ [1, 1, K, 1]), its own kernels."""

    name = "gemv"
    fused_roles = ()

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        return emit(k, name, fwd)


def emit(k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
    """The kernels and forward lines of an mv anchor."""
    m, kk = k.operands["a"].space[2], k.operands["a"].space[3]
    bk = pow2(kk, 16, 1024)
    bm = smax(1, smin(pow2(m), Sym(TILE // int(bk), f"{TILE} // BLOCK_K", 2) if isinstance(bk, Sym) else TILE // bk))
    consts = {"BLOCK_K": bk, "BLOCK_M": bm}
    if worth_splitting(kk, -(-int(m) // int(bm))):
        return _split(k, name, fwd, m, kk, consts)
    launch = Launch(fwd)
    body = _body(k, launch, m, kk)
    epi, value, out, off = _outputs(k, launch)
    src = render("gemv.py.j2", name=name, stage="whole", comment=_describe(k), signature=launch.signature(["BLOCK_M", "BLOCK_K"]),
                 load_a=body[0], load_x=body[1], epilogue=epi, out=out, out_off=off, value=value)
    return src, launch.call(name, f"(triton.cdiv({m}, BLOCK_M),)", consts)


def _split(k: Kernel, name: str, fwd: Forward, m: int, kk: int, consts: dict) -> tuple[str, list[str]]:
    ws = fwd.fresh(f"{k.target.value}_part")
    first = Launch(fwd)
    first.buffer("part_ptr", ws)
    body = _body(k, first, m, kk)
    first.scalar("CHUNK", "CHUNK")
    first.scalar("SPLIT", "SPLIT")
    src1 = render("gemv.py.j2", name=part_name(name), stage="partial", comment=f"K-chunk partials of {_describe(k)}",
                  signature=first.signature(["BLOCK_M", "BLOCK_K"]), load_a=body[0], load_x=body[1])
    second = Launch(fwd)
    second.buffer("part_ptr", ws)
    second.scalar("M", m)
    second.scalar("SPLIT", "SPLIT")
    epi, value, out, off = _outputs(k, second)
    src2 = render("gemv.py.j2", name=name, stage="combine", comment=_describe(k), signature=second.signature(["BLOCK_M"]),
                  epilogue=epi, out=out, out_off=off, value=value)
    lines1 = first.call(part_name(name), f"(triton.cdiv({m}, BLOCK_M), SPLIT)", consts)
    blocks = row_blocks(m, consts["BLOCK_M"], text(consts["BLOCK_M"], "BLOCK_M"))
    lines = lines1[:-1] + chunk_lines(str(kk), text(consts["BLOCK_K"], "BLOCK_K"), blocks)
    lines.append(f"{ws} = torch.empty((SPLIT, {m}), device={first.args[1]}.device, dtype=torch.float32)")
    lines.append(lines1[-1])
    lines += [ln for ln in second.call(name, f"(triton.cdiv({m}, BLOCK_M),)", {"BLOCK_M": consts["BLOCK_M"]})
              if not ln.startswith("BLOCK_")]  # computed for the first launch
    return src1 + "\n\n" + src2, lines


def _body(k: Kernel, launch: Launch, m: int, kk: int) -> tuple[str, str]:
    """The K step's loads: an [BLOCK_M, BLOCK_K] tile of A and a BLOCK_K slice of x."""
    launch.scalar("M", m)
    launch.scalar("K", kk)
    load_a, _ = operand_lines(launch, k.operands["a"].expr, [None, None, "rm[:, None]", "rk[None, :]"],
                              "(rm[:, None] < M) & (rk[None, :] < K)", other="0.0", var="a",
                              full="(BLOCK_M, BLOCK_K)", exact=True)
    load_x, _ = operand_lines(launch, k.operands["b"].expr, [None, None, "rk", None], "rk < K", other="0.0",
                              var="xv", full="(BLOCK_K,)", exact=True)
    return load_a[0], load_x[0]


def _outputs(k: Kernel, launch: Launch) -> tuple[list[str], str, str, str]:
    coords = [None, None, "rm", None]
    epi, value = operand_lines(launch, k.expr, coords, "mask", other="0.0", full="(BLOCK_M,)")
    target = k.target.leaf()
    out = launch.pointer(target, hint="out")
    return epi, value, out, store_offset(launch, target, coords, None, "(BLOCK_M,)")


def _describe(k: Kernel) -> str:
    what = f"mv({exprs.describe(k.operands['a'].expr)}, {exprs.describe(k.operands['b'].expr)})"
    return f"{k.target.value} = {exprs.describe(k.expr, acc=what)}"


FAMILIES = (Gemv(),)
