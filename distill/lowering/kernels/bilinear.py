"""The bilinear form y[b, o] = sum_ij x1[b, i] W[o, i, j] x2[b, j] (torch.einsum("bi,oij,bj->bo")).

Two forms, chosen from the problem's sizes (either is correct at any size):

- contract first (I and J both 16 or more): for each o, T = x1 @ W[o] is an ordinary [B, I] @ [I, J]
  GEMM on tensor cores, and y[b, o] = sum_j T[b, j] x2[b, j] is its epilogue, a row dot with a tile
  of x2. A program owns a [BLOCK_B, BLOCK_N] tile of T for one o and stores its row sums; a second
  kernel adds the cdiv(N, BLOCK_N) partial sums of each y in order (deterministic), then the
  epilogue. The GEMM contracts the longer of I and J (more work per program, fewer partials) and
  tiles the shorter. On an H100 the pairs form below ran (B=128, I=152, O=256, J=2896) on 4 programs:
  37 ms against eager's 1.0 ms, and (B=I=J=3444, O=1) with 15 of every 16 output lanes padding:
  1.76 s against 6 ms.
- pairs (I or J under 16, where the GEMM above would be mostly padding): one GEMM y = A @ W^T with
  A[b, (i, j)] = x1[b, i] x2[b, j] formed tile by tile in registers (never stored) and W read as
  [O, I*J]. The first form of all (for each i, x2 @ W[:, i, :]^T with J padded to a tile) spent most
  lanes on padding for a short J: B=110218, I=609, O=38, J=27 took 49 ms against eager's 3.7 ms.

Every product accumulates in fp32, on tensor cores as three TF32 products: in the contract-first GEMM
with SPLIT_MIN_B rows or more, W is split into TF32 parts once beforehand (kernels/tf32split.py); else, as
in the pairs form, Triton's tf32x3 splits both tiles in the loop.
"""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.ir import Op, Program
from distill.lowering.kernels import tf32split
from distill.lowering.kernels.base import Family, Forward, Launch, OperandSpec, operand_lines, pow2, render, store_offset
from distill.lowering.kernels.split import cdiv, chunk_lines, part_name, text, worth_splitting
from distill.lowering.planner import Kernel

# W is split into TF32 parts from this many rows B, later than a matmul's B (128 rows,
# kernels/tf32split.py): on an H100 a bilinear with B = 128, O = 256, I = 152, J = 2896 ran 0.81x
# with its 450 MB W split
SPLIT_MIN_B = 512

# the contracted GEMM's tiles: matmul's 2-D tiles (up to 128 x 128, K 32 at a time, 3 stages)
TILE_MAX, K_STEP, STAGES = 128, 32, 3
# below this, a dim of the contract-first GEMM would be mostly padding (tl.dot's smallest tile side)
MIN_SIDE = 16
# K elements per program, at least, when the contract-first GEMM's K is split (as matmul's MIN_K_CHUNK)
MIN_K_CHUNK = 512


class Bilinear(Family):
    name = "bilinear"

    def slot_roles(self, op: Op) -> list[str]:
        return ["x1", "w", "x2"]

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        return [OperandSpec(r, v, (), prog.values[v].shape) for r, v in zip(self.slot_roles(op), op.inputs)]

    def describe(self, k: Kernel) -> str:
        args = ", ".join(exprs.describe(k.operands[r].expr) for r in self.slot_roles(k.op))
        return f"{k.target.value} = {exprs.describe(k.expr, acc=f'einsum(bi,oij,bj->bo; {args})')}"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        i_size, j = k.operands["x1"].space[1], k.operands["w"].space[2]
        if min(int(i_size), int(j)) >= MIN_SIDE:
            return self._contract(k, name, fwd)
        return self._pairs(k, name, fwd)

    def _contract(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        x1, w, x2 = (k.operands[r] for r in ("x1", "w", "x2"))
        b, i_size = x1.space
        o, j = w.space[0], w.space[2]
        # contract the longer of I and J: x1 and x2 swap roles, and W is read transposed
        over_i = int(i_size) >= int(j)
        left, right = (x1, x2) if over_i else (x2, x1)
        kk, n = (i_size, j) if over_i else (j, i_size)
        ws = fwd.fresh(f"{k.target.value}_part")
        first = Launch(fwd)
        first.buffer("part_ptr", ws)
        for sym, val in (("B", b), ("O", o), ("K", kk), ("N", n)):
            first.scalar(sym, val)
        load_left, _ = operand_lines(first, left.expr, ["rb[:, None]", "rk[None, :]"],
                                     "(rb[:, None] < B) & (rk[None, :] < K)", other="0.0", var="left", exact=True,
                                     full="(BLOCK_B, BLOCK_K)")
        w_mask = "(rk[:, None] < K) & (rn[None, :] < N)"
        pre_src, pre_lines = "", []
        split_w = isinstance(w.expr, exprs.Load) and int(b) >= SPLIT_MIN_B and \
            int(o) * int(i_size) * int(j) <= tf32split.INT32_MAX
        if split_w:
            # W is re-read by every row tile of the GEMM: split it into TF32 parts once
            pre_src, pre_lines, hi, lo = tf32split.emit_split(w.expr, tuple(w.space), name[: -len("_kernel")], fwd)
            first.buffer("w_hi_ptr", hi)
            first.buffer("w_lo_ptr", lo)
            w_off = "o * K * N + " + ("rk[:, None] * N + rn[None, :]" if over_i else "rn[None, :] * K + rk[:, None]")
            load_w = ["\n        ".join(f"w_{part} = tl.load(w_{part}_ptr + {w_off}, mask={w_mask}, other=0.0)"
                                         for part in ("hi", "lo"))]
        else:
            w_coords = ["o", "rk[:, None]", "rn[None, :]"] if over_i else ["o", "rn[None, :]", "rk[:, None]"]
            load_w, _ = operand_lines(first, w.expr, w_coords, w_mask, other="0.0", var="w", exact=True,
                                      full="(BLOCK_K, BLOCK_N)")
        load_right, _ = operand_lines(first, right.expr, ["rb[:, None]", "rn[None, :]"], "tile_mask", other="0.0",
                                      var="right", exact=True, full="(BLOCK_B, BLOCK_N)")
        bb, bn = pow2(b, 16, TILE_MAX), pow2(n, 16, TILE_MAX)
        warps = 8 if int(bb) * int(bn) >= TILE_MAX * TILE_MAX // 2 else 4
        # few tiles, long K: K is cut into SPLIT chunks too, each chunk's row sums one more partial sum
        # of y. Unsplit, B=304, I=38, O=6, J=262144 (L5-7276ee5e4) ran 3 x 1 x 6 = 18 programs on 132
        # SMs, each walking K=262144 (about 8 ms against eager's whole problem's 1.9)
        split_k = worth_splitting(kk, cdiv(b, bb) * cdiv(n, bn) * int(o), MIN_K_CHUNK)
        if split_k:
            first.scalar("CHUNK", "CHUNK")
        consts = {"BLOCK_B": bb, "BLOCK_N": bn, "BLOCK_K": pow2(kk, 16, K_STEP), "num_warps": warps,
                  "num_stages": STAGES}
        # x1 bigger than W: the programs of one row tile of x1 run together (o fastest); else those of
        # one slice of W (row tiles fastest), so whichever is re-read comes from L2
        o_fastest = int(b) * int(i_size) > int(o) * int(i_size) * int(j)
        src1 = render("bilinear.py.j2", stage="partial", name=part_name(name), comment=self.describe(k),
                      signature=first.signature(["BLOCK_B", "BLOCK_N", "BLOCK_K"]), over="i" if over_i else "j",
                      o_fastest=o_fastest, load_left=load_left[0], load_w=load_w[0], load_right=load_right[0],
                      split_w=split_w, split_k=split_k)
        src2, second = self._combine(k, name, fwd, ws, "PARTS")
        n_tiles = f"triton.cdiv({b}, BLOCK_B) * triton.cdiv({n}, BLOCK_N) * {o}"
        lines1 = pre_lines + first.call(part_name(name), f"({n_tiles}" + " * SPLIT" * split_k + ",)", consts)
        # the host lines around the launch name a block size only where it is a symbol: a literal one is
        # inlined into the call (BLOCK_B=16 for B=1 left `BLOCK_B` undefined: L10-d71792ea, seed 404)
        bb_text, bn_text, bk_text = (text(consts["BLOCK_" + c], "BLOCK_" + c) for c in "BNK")
        host_tiles = f"triton.cdiv({b}, {bb_text}) * triton.cdiv({n}, {bn_text}) * {o}"
        lines = lines1[:-1] + (chunk_lines(str(kk), bk_text, host_tiles, min_chunk=MIN_K_CHUNK) if split_k else []) + [
            f"PARTS = triton.cdiv({n}, {bn_text})" + " * SPLIT" * split_k
            + "  # one partial sum of each y per column tile of the GEMM" + " and K chunk" * split_k,
            f"{ws} = torch.empty((PARTS, {b}, {o}), device={first.args[1]}.device, dtype=torch.float32)",
            lines1[-1],
        ]
        lines += second.call(name, f"(triton.cdiv({b} * {o}, BLOCK),)", {"BLOCK": 1024})
        return (pre_src + "\n\n" if pre_src else "") + src1 + "\n\n" + src2, lines

    def _pairs(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        x1, w, x2 = (k.operands[r] for r in ("x1", "w", "x2"))
        b, i_size = x1.space
        o, j = w.space[0], w.space[2]
        launch = Launch(fwd)
        # J of a tile or more (I is then the short side): i in an outer loop, j in the inner one, so
        # the x2 and W tiles are runs of neighbouring addresses. Flattened, (i, j) = (k // J, k % J)
        # hid that contiguity from Triton: B=152, I=4, O=4871, J=3444 (L5-3d73f2c3f) and B=55109, I=6,
        # O=304, J=362 (L5-891e3c9fc) gathered W element by element (3-9x eager's time)
        inner_j = int(j) >= MIN_SIDE
        for sym, val in (("B", b), ("O", o)) + ((("I", i_size),) if inner_j else (("K", i_size * j),)) + (("J", j),):
            launch.scalar(sym, val)
        kmask = "(rj[None, :] < J)" if inner_j else "(rk[None, :] < K)"
        load_x1, _ = operand_lines(launch, x1.expr, ["rb", "i"] if inner_j else ["rb[:, None]", "ri[None, :]"],
                                   "rb < B" if inner_j else f"(rb[:, None] < B) & {kmask}", other="0.0", var="left",
                                   exact=True, full="(BLOCK_B,)" if inner_j else "(BLOCK_B, BLOCK_K)")
        load_x2, _ = operand_lines(launch, x2.expr, ["rb[:, None]", "rj[None, :]"], f"(rb[:, None] < B) & {kmask}",
                                   other="0.0", var="right", exact=True, full="(BLOCK_B, BLOCK_K)")
        load_w, _ = operand_lines(launch, w.expr, ["ro[None, :]", "i" if inner_j else "ri[:, None]", "rj[:, None]"],
                                  f"(ro[None, :] < O) & {kmask.replace('[None, :]', '[:, None]')}", other="0.0",
                                  var="w", exact=True, full="(BLOCK_K, BLOCK_O)")
        # 8 warps: at 4 the [128, 64] fp32 accumulator and the tf32x3 operand splits took 255 registers
        # and spilled (ptxas for sm_90: 132 bytes flattened, 288 by j blocks; 181 and 206 registers at 8)
        consts = {"BLOCK_B": pow2(b, 16, 128), "BLOCK_O": pow2(o, 16, 64), "BLOCK_K": 32, "num_warps": 8}
        tiles = f"triton.cdiv({b}, BLOCK_B) * triton.cdiv({o}, BLOCK_O)"
        # few tiles, long I*J: the pairs are cut into SPLIT chunks too (by i's when j is the inner loop),
        # each chunk's tile one partial of y. Unsplit, B=1024, I=38968, O=76, J=4 (seed 909's L5-5a8a657b)
        # ran 8 x 2 = 16 programs on 132 SMs, each walking 155,872 pairs: 29 ms against eager's 2.9
        split_k = worth_splitting(i_size * j, cdiv(b, consts["BLOCK_B"]) * cdiv(o, consts["BLOCK_O"]), MIN_K_CHUNK)
        if not split_k:
            coords, full = ["rb[:, None]", "ro[None, :]"], "(BLOCK_B, BLOCK_O)"
            epi, value = operand_lines(launch, k.expr, coords, "mask", other="0.0", full=full)
            target = k.target.leaf()
            out = launch.pointer(target, hint="out")
            off = store_offset(launch, target, coords, None, full)
            src = render("bilinear.py.j2", stage="pairs", name=name,
                         signature=launch.signature(["BLOCK_B", "BLOCK_O", "BLOCK_K"]),
                         comment=self.describe(k), load_left=load_x1[0], load_w=load_w[0], load_right=load_x2[0],
                         epilogue=epi, out=out, out_off=off, value=value, inner_j=inner_j, split_k=False)
            return src, launch.call(name, f"({tiles},)", consts)
        ws = fwd.fresh(f"{k.target.value}_part")
        launch.buffer("part_ptr", ws)
        launch.scalar("CHUNK", "CHUNK")
        src1 = render("bilinear.py.j2", stage="pairs", name=part_name(name),
                      signature=launch.signature(["BLOCK_B", "BLOCK_O", "BLOCK_K"]),
                      comment=self.describe(k), load_left=load_x1[0], load_w=load_w[0], load_right=load_x2[0],
                      inner_j=inner_j, split_k=True)
        lines1 = launch.call(part_name(name), f"({tiles} * SPLIT,)", consts)
        bb_text, bo_text = (text(consts["BLOCK_" + c], "BLOCK_" + c) for c in "BO")
        host_tiles = f"triton.cdiv({b}, {bb_text}) * triton.cdiv({o}, {bo_text})"
        # chunks of i's (whole rows of J pairs) when j is the inner loop, else of pairs
        length, step, least = (str(i_size), "1", cdiv(MIN_K_CHUNK, j)) if inner_j else \
            (str(i_size * j), "32", MIN_K_CHUNK)
        lines = lines1[:-1] + chunk_lines(length, step, host_tiles, min_chunk=least) + [
            f"{ws} = torch.empty((SPLIT, {b}, {o}), device={launch.args[0]}.device, dtype=torch.float32)",
            lines1[-1],
        ]
        src2, second = self._combine(k, name, fwd, ws, "SPLIT")
        lines += second.call(name, f"(triton.cdiv({b} * {o}, BLOCK),)", {"BLOCK": 1024})
        return src1 + "\n\n" + src2, lines

    def _combine(self, k: Kernel, name: str, fwd: Forward, ws: str, parts: str) -> tuple[str, Launch]:
        """The second kernel of both split forms: adds the `parts` partial sums of each y[b, o] in order
        from the [parts, B, O] workspace `ws`, then the epilogue; its source and its launch."""
        b, o = k.operands["x1"].space[0], k.operands["w"].space[0]
        second = Launch(fwd)
        second.buffer("part_ptr", ws)
        for sym, val in (("B", b), ("O", o), ("PARTS", parts)):
            second.scalar(sym, val)
        coords, full = ["rb", "ro"], "(BLOCK,)"
        epi, value = operand_lines(second, k.expr, coords, "mask", other="0.0", full=full)
        target = k.target.leaf()
        out = second.pointer(target, hint="out")
        off = store_offset(second, target, coords, None, full)
        src = render("bilinear.py.j2", stage="combine", name=name, comment=self.describe(k),
                     signature=second.signature(["BLOCK"]), epilogue=epi, out=out, out_off=off, value=value)
        return src, second


FAMILIES = (Bilinear(),)
