"""Kernel families of the reference lowering: one emitter and one jinja2 template per family."""
from __future__ import annotations

from distill.lowering.kernels.base import Family

FAMILIES: dict[str, Family] = {}


def _register() -> None:
    from distill.lowering.kernels import attention, bilinear, conv, gemv, index, losses, matmul, rows, scans, spatial

    for fam in (*rows.FAMILIES, *scans.FAMILIES, *losses.FAMILIES, *matmul.FAMILIES, *attention.FAMILIES, *conv.FAMILIES, *spatial.FAMILIES,
                *index.FAMILIES, *bilinear.FAMILIES, *gemv.FAMILIES):
        FAMILIES[fam.name] = fam


_register()
