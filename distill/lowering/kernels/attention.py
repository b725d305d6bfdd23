"""Scaled dot-product attention: flash style, or with its scores written once for wide heads.

Flash style, one kernel streams keys and values past a block of queries with an online softmax and
the [L, S] scores never reach memory. It shares matmul's tile forms (2-D, or 3-D when many small heads
share a program) and its forward-side tile helpers. With a head or value dim past HEAD_MAX and scores
no larger than the inputs (`scores_form`), two kernels instead: the scaled scores with each row's max
and exp-sum, then softmax(scores) @ v (attention_scores.py.j2). Simplified: the form is chosen from the
drawn sizes; a resized twin runs the same form, correct at any size, perhaps not the faster one there.
"""
from __future__ import annotations

import math
from typing import Any

from distill.lowering import exprs
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import Family, Forward, Launch, OperandSpec, operand_lines, pow2, render, store_offset
from distill.lowering.kernels.matmul import TileForm, batch_block, batch_lines, constexprs, literal, named, pick
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit, next_pow2, smin

# head dims wider than this are chunked (E) or split across programs (EV)
HEAD_MAX = 128
# Short queries (one or two 16-row blocks) over a value dim wider than HEAD_MAX: a program takes the
# whole value dim, up to this wide, instead of splitting it across programs that each recompute the
# scores. On an H100, sdpa with L = S = 4 or 11 and E = EV = 860-1024 ran 2.3-2.4x faster so (5.56 ->
# 2.44 ms and 4.20 -> 1.73 ms for the whole problems, bench/candidate_variants_gpu.py); a [16, 1024]
# fp32 accumulator is 64 registers a thread at 8 warps, and a 16-key block of values 64 KiB a stage.
WIDE_V_MAX = 1024
# Up to this many queries take the short form as 16-row blocks when the value dim or the head is past
# HEAD_MAX. The split form would give them one 32-row block, below wgmma's 64 rows: with E chunked it
# spilled 5.7-6.4 KB a thread compiled for sm_90 (BLOCK_V 64 or 128; Triton 3.6, PTX and ptxas -v),
# and on an H200 sdpa at L = 19, S = 38, E = 152, V = 256 so ran 126.8 ms against eager's 1.23 (issue
# 34). Two 16-row blocks of one head are neighbouring programs: the second reads keys and values from L2.
WIDE_L_MAX = 32
# The short form sums a head past HEAD_MAX in chunks this wide. Compiled for sm_90 (Triton 3.6, PTX and
# ptxas -v, 8 warps, 16-row and 16-key blocks), 128-wide chunks spilled 484 bytes a thread at a
# 256-wide value dim and 1500 at 1024; 64-wide chunks none and 484; the same padded E in all.
WIDE_E_CHUNK = 64
# The scores form (two kernels, the [L, S] scores written once and read back; attention_scores.py.j2)
# takes a head or value dim past HEAD_MAX whenever the scores are no larger than q, k, v and the output
# together, so writing and reading them at most doubles the traffic. On an H200 the flash forms there
# ran far from eager's kernel: 5.5 ms against 1.22 (L 19, S 38, E 152, V 256, the short form) and 8.8
# against 1.1 for a whole problem (L 304, S 108, E 2048, V 1722, 14 value slices each computing every
# score again; issue 34).
# Query and key blocks of up to SCORE_TILE, the head summed in SCORE_CHUNK-wide chunks, values SCORE_V wide,
# 8 warps. Compiled for sm_90 (Triton 3.6, PTX and ptxas -v), at 4 warps both kernels spilled 440-540
# bytes a thread; at 8 none did at 16 or 32 queries, and at 64 queries 64-wide head chunks spilled 92
# bytes (32-wide: none) and 128-wide value slices 72. Timed on an H200 (bench/candidate_variants_gpu.py),
# 128-wide value slices against 64 were 1.33x faster at L 19, S 38, E 152, V 256 and 1.05x at L 108,
# spills and all; 64-wide head chunks against 32, 0.95-0.96x.
SCORE_TILE = 64
SCORE_CHUNK = 32
SCORE_V = 128


def scores_form(seq_l: int, seq_s: int, e: int, ev: int) -> bool:
    """Attention as scores, then softmax(scores) @ v: a head or value dim past HEAD_MAX and scores no
    larger than the inputs and output, per (batch, head) pair (the comment above SCORE_TILE)."""
    q, k, e, ev = int(seq_l), int(seq_s), int(e), int(ev)
    return max(e, ev) > HEAD_MAX and q * k <= q * e + k * e + k * ev + q * ev


def wide_values(seq_l: int, ev: int, e: int) -> bool:
    """The short form: up to 16 queries over a value dim past HEAD_MAX, or up to WIDE_L_MAX over a
    value dim or a head past it (16 or fewer with a wide head and narrow values keep the split form,
    whose 16-row tiles did not spill)."""
    if int(seq_l) <= 16:
        return int(ev) > HEAD_MAX
    return int(seq_l) <= WIDE_L_MAX and max(int(ev), int(e)) > HEAD_MAX


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

    @staticmethod
    def tiles(bh: int, seq_l: int, seq_s: int, e: int, ev: int) -> tuple[TileForm, dict, str]:
        """Tiles within shared memory and registers, the kernel form and forward's grid.

        BLOCK_E and BLOCK_V cover the head dims up to HEAD_MAX; wider ones are chunked (E) or split
        across programs (EV). BLOCK_L is 64 (less only for shorter L), the M of one warpgroup's
        wgmma: 32-row tiles fall back to mma.sync, and spilled at 256-wide heads. A key block's loads
        take (BLOCK_L * BLOCK_E + BLOCK_E * BLOCK_S + BLOCK_S * BLOCK_V) * 4 bytes a stage: 48 KiB at
        64 + 64 with 64-key blocks and 3 stages; past 128 in all, 32-key blocks, 2 stages and 8 warps
        (64 KiB a stage at 128 + 128). Compiled for sm_90 (Triton 3.6, to PTX and ptxas): 128 KiB of
        shared memory and no spills for both; E = EV = 512 (chunked and split), 80 KiB and a few
        hundred bytes of spills. The whole-head tiles before took 384 KiB there."""
        wide = wide_values(seq_l, ev, e)
        be = pow2(e, 16, WIDE_E_CHUNK if wide and int(e) > HEAD_MAX else HEAD_MAX)
        ne = named(be, "BLOCK_E")
        chunked = int(be) < int(e)
        e_chunked = chunked if literal(be, e) else Sym(chunked, f"{ne} < {e}", 0)
        tiles = f"triton.cdiv({seq_l}, BLOCK_L) * triton.cdiv({ev}, BLOCK_V)"
        one_pair = f"({tiles}{'' if is_unit(bh) else f' * {bh}'},)"  # a (batch, head) pair a program
        if wide:
            consts = {"BLOCK_E": be, "BLOCK_V": pow2(ev, 16, WIDE_V_MAX), "BLOCK_L": 16, "BLOCK_S": 16,
                      "E_CHUNKED": e_chunked, "num_warps": 8, "num_stages": 2}
            return TileForm(False), consts, one_pair
        bv = pow2(ev, 16, HEAD_MAX)
        nv = named(bv, "BLOCK_V")
        width = ne + nv
        bl = pow2(seq_l, 16, 64)
        bs = smin(pow2(seq_s, 16), pick(width, 128, 64, 32))
        consts = {"BLOCK_E": be, "BLOCK_V": bv, "BLOCK_L": bl, "BLOCK_S": bs, "E_CHUNKED": e_chunked,
                  "num_warps": pick(width, 128, 4, 8), "num_stages": pick(width, 128, 3, 2)}
        nl, ns = named(bl, "BLOCK_L"), named(bs, "BLOCK_S")
        per_matrix = nl * ne + ne * ns + ns * nv
        bb = batch_block(bh, next_pow2(per_matrix), 4096)
        if int(bb) > 1:
            consts["BLOCK_B"] = bb
            return TileForm(True, "b_ok"), consts, f"({tiles} * triton.cdiv({bh}, BLOCK_B),)"
        return TileForm(False), consts, one_pair

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        q, kk, v = (k.operands[r] for r in ("q", "k", "v"))
        b, h, seq_l, e = q.space
        seq_s, ev = kk.space[2], v.space[3]
        if scores_form(seq_l, seq_s, e, ev):
            return self._emit_scores(k, name, fwd)
        form, consts, grid = self.tiles(b * h, seq_l, seq_s, e, ev)
        launch = Launch(fwd)
        for sym, val in (("L", seq_l), ("S", seq_s), ("E", e), ("EV", ev)):
            launch.scalar(sym, val)
        # the 1/sqrt(E) softmax scale follows the head size, so forward computes it
        launch.scalar("scale", f"{e} ** -0.5" if isinstance(e, Sym) else repr(1.0 / math.sqrt(e)))
        batch, c0, c1 = batch_lines(launch, b, h, form.batched)
        load_q, load_k = _query_key_loads(launch, k, form, c0, c1)
        values = _value_side(launch, k, form, c0, c1)
        src = render("attention.py.j2", name=name, signature=launch.signature(constexprs(consts)),
                     batched=form.batched, wide_values=wide_values(seq_l, ev, e), comment=self.describe(k), batch_lines=batch,
                     load_q=load_q, load_k=load_k, causal=bool(k.op.attrs.get("is_causal")), **values)
        return src, launch.call(name, grid, consts)

    def _emit_scores(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        """The scores form: a kernel writing the scaled scores and each row's max and exp-sum, then one
        reading them back through the softmax into the product with the values and the epilogue."""
        q, kk, v = (k.operands[r] for r in ("q", "k", "v"))
        b, h, seq_l, e = q.space
        seq_s, ev = kk.space[2], v.space[3]
        form = TileForm(False)
        causal = bool(k.op.attrs.get("is_causal"))
        tiles = {"BLOCK_L": pow2(seq_l, 16, SCORE_TILE), "BLOCK_S": pow2(seq_s, 16, SCORE_TILE)}
        w, stats = fwd.fresh(f"{k.target.value}_scores"), fwd.fresh(f"{k.target.value}_rowstats")

        first = Launch(fwd)
        for sym, val in (("L", seq_l), ("S", seq_s), ("E", e)):
            first.scalar(sym, val)
        first.scalar("scale", f"{e} ** -0.5" if isinstance(e, Sym) else repr(1.0 / math.sqrt(e)))
        batch, c0, c1 = batch_lines(first, b, h, False)
        load_q, load_k = _query_key_loads(first, k, form, c0, c1)
        first.buffer("w_ptr", w)
        first.buffer("stats_ptr", stats)
        consts_a = {**tiles, "BLOCK_E": pow2(e, 16, SCORE_CHUNK), "num_warps": 8, "num_stages": 2}
        src = render("attention_scores.py.j2", name=_scores_name(name), stage="scores", causal=causal,
                     signature=first.signature(constexprs(consts_a)), comment=f"the scores of {self.describe(k)}",
                     batch_lines=batch, load_q=load_q, load_k=load_k)
        device = f"{first.args[0]}.device"  # q's tensor, as forward holds it
        pairs = f"({b}) * ({h})"
        lines = [f"{w} = torch.empty(({pairs}, {seq_l}, {seq_s}), device={device}, dtype=torch.float32)",
                 f"{stats} = torch.empty(({pairs} * ({seq_l}), 2), device={device}, dtype=torch.float32)"]
        lines += first.call(_scores_name(name), f"(triton.cdiv({seq_l}, BLOCK_L) * {pairs},)", consts_a)

        second = Launch(fwd)
        second.buffer("w_ptr", w)
        second.buffer("stats_ptr", stats)
        for sym, val in (("L", seq_l), ("S", seq_s), ("EV", ev)):
            second.scalar(sym, val)
        batch, c0, c1 = batch_lines(second, b, h, False)
        values = _value_side(second, k, form, c0, c1)
        consts_b = {**tiles, "BLOCK_V": pow2(ev, 16, SCORE_V), "num_warps": 8, "num_stages": 2}
        src2 = render("attention_scores.py.j2", name=name, stage="values", causal=causal,
                      signature=second.signature(constexprs(consts_b)), comment=self.describe(k), batch_lines=batch,
                      **values)
        grid = f"(triton.cdiv({seq_l}, BLOCK_L) * triton.cdiv({ev}, BLOCK_V) * {pairs},)"
        lines += [ln for ln in second.call(name, grid, consts_b) if ln not in lines]
        return src + "\n\n" + src2, lines


def _query_key_loads(launch: Launch, k: Kernel, form: TileForm, c0: str | None, c1: str | None) -> tuple[str, str]:
    """The load lines of a [BLOCK_L, BLOCK_E] query tile and a [BLOCK_E, BLOCK_S] key tile (keys
    transposed: E along the rows, S along the columns), shared by both forms."""
    load_q, _ = operand_lines(launch, k.operands["q"].expr, form.coords(c0, c1, "rl", "re"),
                              form.mask("rl", "L", "re", "E"), other="0.0", var="q", exact=True,
                              full=form.full("BLOCK_L", "BLOCK_E"))
    load_k, _ = operand_lines(launch, k.operands["k"].expr, [form.b(c0), form.b(c1), form.col("rs"), form.row("re")],
                              form.mask("re", "E", "rs", "S"), other="0.0", var="kt", exact=True,
                              full=form.full("BLOCK_E", "BLOCK_S"))
    return load_q[0], load_k[0]


def _value_side(launch: Launch, k: Kernel, form: TileForm, c0: str | None, c1: str | None) -> dict[str, Any]:
    """The template's value-side fields, shared by both forms: the [BLOCK_S, BLOCK_V] value tile's load,
    then the epilogue over the [BLOCK_L, BLOCK_V] output tile and its store."""
    load_v, _ = operand_lines(launch, k.operands["v"].expr, form.coords(c0, c1, "rs", "rv"),
                              form.mask("rs", "S", "rv", "EV"), other="0.0", var="v", exact=True,
                              full=form.full("BLOCK_S", "BLOCK_V"))
    out_coords = form.coords(c0, c1, "rl", "rv")
    full = form.full("BLOCK_L", "BLOCK_V")
    epi, value = operand_lines(launch, k.expr, out_coords, "mask", other="0.0", full=full)
    target = k.target.leaf()
    out = launch.pointer(target, hint="out")
    return {"load_v": load_v[0], "epilogue": epi, "out": out, "value": value,
            "out_off": store_offset(launch, target, out_coords, None, full)}


def _scores_name(name: str) -> str:
    return name[: -len("_kernel")] + "_scores_kernel"


FAMILIES = (Attention(),)
