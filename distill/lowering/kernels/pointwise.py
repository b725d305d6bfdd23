"""Pointwise kernels: a fused tree of elementwise ops (and plain copies) over one result's elements."""
from __future__ import annotations

import math

from distill.lowering import exprs
from distill.lowering.kernels.base import Forward, Launch, coord_lines, coord_names, operand_lines, pow2, render
from distill.lowering.planner import Kernel
from distill.lowering.sizes import is_unit

BLOCK = 1024
# 8 warps: four elements a thread, one 16-byte load and store each. At 4 warps (eight a thread) a flat
# kernel ran 0.73-0.93x eager on an H100 (selu 0.731 ms against 0.507 over 190M elements, hardtanh
# 0.534 against 0.426); with 8 it matched eager on all ten such problems, 1.07-1.45x faster than at 4,
# as did BLOCK 512 at 4 warps; BLOCK 2048 at 8 warps did not (bench/candidate_variants_gpu.py)
WARPS = 8


# a transposing copy's tile: up to [64, 64] elements, loaded along one dim and stored along the other
TILE = 64
# the smallest dims worth a tile: a store along the result's last dim of 8 float32 fills a 32-byte
# sector, and a load along the operand's dim of 16 fills two. Below these the flat kernel stays: with
# the result's last dim at 23 (a 4-d permute moving the outermost axis innermost), the flat kernel
# gathered every element from its own sector and took 2.46 ms on an H200 where eager took 0.185
MIN_A, MIN_B = 16, 8


def transposed_dims(target: exprs.Leaf, leaves: list[exprs.Leaf]) -> tuple[int, int] | None:
    """(a, b): b is the dense result's innermost dim of more than one element (its stores are
    contiguous along b), a a result dim along which an operand is contiguous while it is not along b
    (the operand is read through a transpose or a permute), when both dims span a sector."""
    shape = target.shape
    wide = [d for d in range(len(shape)) if not is_unit(shape[d])]
    if not target.is_dense or len(wide) < 2 or int(shape[wide[-1]]) < MIN_B:
        return None
    b = wide[-1]
    for lf in leaves:
        if lf.strides[b] in (0, 1):
            continue
        for a in wide[:-1]:
            if lf.strides[a] == 1 and int(shape[a]) >= MIN_A:
                return a, b
    return None


def emit(k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
    target = k.target.leaf()
    ab = transposed_dims(target, exprs.leaves(k.expr))
    if ab is not None:
        return _transposing(k, name, fwd, target, *ab)
    shape = target.shape
    n = math.prod(shape)
    launch = Launch(fwd)
    leaves = exprs.leaves(k.expr)
    # the flat index addresses dense operands directly; the others need per-dim coordinates
    needs_coords = not (target.is_dense and all(lf.is_dense for lf in leaves))
    launch.pointer(target, hint="out")
    launch.scalar("n_elements", n)
    coords = coord_names(shape, "offs", "i") if needs_coords else ["offs" if not is_unit(d) else None for d in shape]
    body, result = operand_lines(launch, k.expr, coords, "mask", flat="offs")
    out_off = launch.offset(target, coords, flat="offs")
    out_off = out_off if out_off != "0" else "offs * 0"  # a one-element result: lane 0 stores it
    lines = coord_lines(shape, "offs", "i", launch, "\n".join(body + [out_off])) if needs_coords else []
    block = pow2(n, lo=16, hi=BLOCK)
    src = render("pointwise.py.j2", name=name, signature=launch.signature(["BLOCK"]),
                 comment=comment(k), shape=shape, coord_lines=lines, body=body, out=launch.names[target],
                 out_off=out_off, result=result)
    return src, launch.call(name, f"(triton.cdiv({n}, BLOCK),)", {"BLOCK": block, "num_warps": WARPS})


def comment(k: Kernel) -> str:
    what = exprs.describe(k.expr)
    dest = k.target.value if not k.target.steps else f"{k.target.value}{''.join(s.render() for s in k.target.steps)}"
    return f"{dest} = {what}" + (f"  ({k.note})" if k.note else "")


def _transposing(k: Kernel, name: str, fwd: Forward, target: exprs.Leaf, a: int, b: int) -> tuple[str, list[str]]:
    """[BLOCK_A, BLOCK_B] tiles over result dims a (an operand's contiguous dim) and b (the result's
    innermost): the loads run along a and the store along the last dim, and Triton moves the tile
    between the two layouts through shared memory. Flat over the result, a warp's loads of an operand
    read through a transpose land a row apart each: `sin(x.transpose(1, 2))` of a (91, 5793, 152)
    tensor took 0.76 ms on an H100 where eager, reading and writing in the input's order, took about a
    quarter of that. The other dims are one coordinate each per program."""
    shape = target.shape
    launch = Launch(fwd)
    launch.pointer(target, hint="out")
    launch.scalar("SIZE_A", shape[a])
    launch.scalar("SIZE_B", shape[b])
    others = [d for d in range(len(shape)) if d not in (a, b)]
    rest_shape = tuple(shape[d] for d in others)
    rest_names = coord_names(rest_shape, "rest", "i")
    coords: list[str | None] = [None] * len(shape)
    coords[a], coords[b] = "ra", "rb"
    for d, c in zip(others, rest_names):
        coords[d] = c
    body, result = operand_lines(launch, k.expr, coords, "mask", full="(BLOCK_A, BLOCK_B)")
    out_off = launch.offset(target, coords, full="(BLOCK_A, BLOCK_B)")
    lines = coord_lines(rest_shape, "rest", "i", launch, "\n".join(body + [out_off]))
    n_rest = math.prod(rest_shape)
    src = render("pointwise.py.j2", name=name, signature=launch.signature(["BLOCK_A", "BLOCK_B"]),
                 comment=comment(k), shape=shape, coord_lines=lines, body=body, out=launch.names[target],
                 out_off=out_off, result=result, tiled=True, dim_a=a, dim_b=b)
    grid = f"(triton.cdiv({shape[a]}, BLOCK_A) * triton.cdiv({shape[b]}, BLOCK_B)" + \
        ("" if is_unit(n_rest) else f" * {n_rest}") + ",)"
    # constants from the sizes lowered at (masks make any tile right at any size); a narrow result dim
    # gets a longer run along the operand's, so that a tile stays 2-4K elements
    block_b = pow2(int(shape[b]), lo=MIN_B, hi=TILE)
    block_a = pow2(int(shape[a]), lo=MIN_A, hi=TILE if block_b > 16 else 4 * TILE)
    return src, launch.call(name, grid, {"BLOCK_A": block_a, "BLOCK_B": block_b})
