"""Split a long reduction or scan across programs: how many pieces, how long each, and the forward lines.

A row family gives each program BLOCK_ROWS whole rows. With few rows and long ones (a norm of one
190M-element vector, a loss over a whole tensor, a cumsum along a 56M-element dim) that is one
program on one SM of 132, at about 1/100 of HBM bandwidth. Here the reduced dim is cut into SPLIT
chunks of CHUNK elements (a multiple of BLOCK_R, so no block straddles two chunks), one program
per (row block, chunk); the per-chunk partials go to a small float32 buffer that a second kernel
combines in a fixed order: deterministic, no atomics.

The rule, on every device (sizes are read at run time, so it holds at any size):

- about PROGRAMS = 4 x 132 programs in all: enough resident programs to keep each H100 SM's loads in
  flight, few enough that the partial buffer and the second kernel stay negligible;
- at least MIN_CHUNK elements per program (64 KiB of fp32), so launch and tail effects stay small;
  a problem whose rows already fill the machine, or whose rows are short, is not split (SPLIT = 1).

Simplified: the split decision (split at all or not) is taken at lowering time from the problem's
sizes; the chunk count is computed in forward, so a resized twin is still correct, only perhaps less
well balanced.
"""
from __future__ import annotations

from typing import Any

from distill.lowering.sizes import Sym

SMS = 132
PROGRAMS = 4 * SMS
MIN_CHUNK = 16384


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def text(x: Any, name: str | None = None) -> str:
    """How forward refers to a size or tile: its variable when forward computed one, else the value."""
    if name is not None and isinstance(x, Sym):
        return name
    return str(x)


def worth_splitting(length: int, row_blocks: int, min_chunk: int = MIN_CHUNK) -> bool:
    """Whether rows (or output tiles) are too few to fill the machine and long enough to cut into two
    chunks or more."""
    return int(row_blocks) < SMS and cdiv(length, min_chunk) >= 2


def chunk_lines(length: str, block: str, row_blocks: str = "1", split: str = "SPLIT", chunk: str = "CHUNK",
                min_chunk: int = MIN_CHUNK, unit: str = "elements") -> list[str]:
    """Forward lines choosing `split` chunks of `chunk` elements (a multiple of `block`) of a dim
    `length` long, shared with `row_blocks` blocks of rows; `unit` names what `min_chunk` counts."""
    per_row = str(cdiv(PROGRAMS, int(row_blocks))) if row_blocks.isdigit() else f"triton.cdiv({PROGRAMS}, {row_blocks})"
    return [
        f"# {split} chunks of {chunk} elements (a multiple of {block}) along the reduced dim: about {PROGRAMS} "
        f"programs in all (4 per SM), {min_chunk} {unit} or more each",
        f"{split} = max(1, min(triton.cdiv({length}, {min_chunk}), {per_row}))",
        f"{chunk} = triton.cdiv(triton.cdiv({length}, {split}), {block}) * {block}",
        f"{split} = triton.cdiv({length}, {chunk})",
    ]


def part_name(name: str) -> str:
    """The first-stage kernel of a split kernel `name` (`l1_norm_kernel` -> `l1_norm_partial_kernel`)."""
    return name[: -len("_kernel")] + "_partial_kernel"


def row_blocks(n_rows: Any, block_rows: Any, block_rows_text: str) -> str:
    """Forward's count of row blocks (`triton.cdiv(n_rows, BLOCK_ROWS)`), a literal when both are."""
    if not isinstance(n_rows, Sym) and not isinstance(block_rows, Sym):
        return str(cdiv(n_rows, block_rows))
    return f"triton.cdiv({n_rows}, {block_rows_text})"
