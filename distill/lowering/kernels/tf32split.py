"""A matmul's right operand split once into TF32 parts, for the three-product fp32 GEMM.

fp32 accuracy on tensor cores: x = hi + lo with hi = x's top 19 bits (sign, exponent, 10 mantissa
bits: exactly a TF32 number) and lo = x - hi, so a @ b ~ a_hi @ b_hi + a_hi @ b_lo + a_lo @ b_hi, three
TF32 products (the dropped a_lo @ b_lo is 2^-22 of the whole). Triton's own
`input_precision="tf32x3"` splits both operands in registers inside the K loop, so each B tile goes
shared memory -> registers -> shared memory again before Hopper's wgmma can read it. Splitting B
beforehand, in one elementwise pass written here, lets the K loop stream b_hi and b_lo tiles straight
into shared memory; A, which wgmma may read from registers, is split in the loop. Each K step's three
products are summed in a fresh accumulator and added to the running sum by an fp32 add: the tensor
core's own accumulation truncates, and accumulated in place the error grew to 3.5e-5 over K = 4871.
On an H100 (bench/matmul_precision_gpu.py) a (2435 x 4871) @ (4871 x 1722) product: 3.22 ms with
tf32x3, 1.28 ms so, 0.99 ms for eager's fp32 cuBLAS; relative error vs float64 4.9e-7 (tf32x3 2.6e-7,
cuBLAS 5.1e-7, one TF32 product 7.8e-4); (9742 x 4096) @ (4096 x 215): 1.69, 0.43 and 0.47 ms.

The pass costs three reads or writes of B against the GEMM's 2 M N K flops: about 80 / M of the GEMM's
time, so the lowering splits only when A has at least MIN_ROWS rows. Against tf32x3 that pays from
about 128 rows: on an H100, products of 128-511 rows in six bench problems ran 1.23-1.86x faster split
in four, the same in one and 0.96x in a (128 x 108) @ (108 x 304) bmm (bench/candidate_variants_gpu.py).
"""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.kernels.base import Forward, Launch, coord_lines, coord_names, operand_lines, render
from distill.lowering.sizes import is_unit

MIN_ROWS = 128
INT32_MAX = 2**31 - 1


def batch_varies(b: exprs.Node) -> tuple[bool, bool] | None:
    """Whether the operand `b` (kernel space [B0, B1, K, N]) changes along each batch dim; None when it
    is not one stored tensor (then it is not split)."""
    if not isinstance(b, exprs.Load):
        return None
    leaf = b.leaf
    return tuple(not is_unit(leaf.shape[d]) and leaf.strides[d] != 0 for d in (0, 1))  # type: ignore[return-value]


def split_shape(space: tuple[int, ...], varies: tuple[bool, bool]) -> tuple[int, ...]:
    """The parts' shape: B's, with the batch dims it is broadcast along kept at 1."""
    b0, b1, kk, n = space
    return (b0 if varies[0] else 1, b1 if varies[1] else 1, kk, n)


def worth_splitting(m: int, space: tuple[int, ...], varies: tuple[bool, bool] | None) -> bool:
    if varies is None:
        return False
    shape = split_shape(space, varies)
    return int(m) >= MIN_ROWS and int(shape[0]) * int(shape[1]) * int(shape[2]) * int(shape[3]) <= INT32_MAX


def emit_split(b: exprs.Node, shape: tuple[int, ...], name: str, fwd: Forward) -> tuple[str, list[str], str, str]:
    """The split kernel of operand `b` over the index space `shape` (its own, with size 1 along dims it
    is broadcast on): its source and forward lines, and the names of the hi and lo tensors forward
    allocates (dense `shape`, fp32)."""
    hi, lo = fwd.fresh(f"{name}_b_hi"), fwd.fresh(f"{name}_b_lo")
    launch = Launch(fwd)
    launch.buffer("hi_ptr", hi)
    launch.buffer("lo_ptr", lo)
    numel = " * ".join(str(s) for s in shape if not is_unit(s)) or "1"
    launch.scalar("n_elements", numel)
    coords = coord_names(shape, "e", "c")
    load, _ = operand_lines(launch, b, coords, "mask", other="0.0", var="b")
    lines = coord_lines(shape, "e", "c", launch, load[0])
    kernel = f"{name}_split_kernel"
    src = render("tf32split.py.j2", name=kernel, signature=launch.signature(["BLOCK"]), coord_lines=lines,
                 load=load[0])
    dims = ", ".join(str(s) for s in shape)
    forward = [f"{hi} = torch.empty(({dims}), device={launch.args[2]}.device, dtype=torch.float32)",
               f"{lo} = torch.empty_like({hi})"]
    forward += launch.call(kernel, f"(triton.cdiv({numel}, BLOCK),)", {"BLOCK": 1024})
    return src, forward, hi, lo
