"""A chi-square goodness-of-fit check without scipy.

Threshold: the upper 0.1% point of chi-square(df) by the Wilson-Hilferty approximation (accurate to
well under 1% of the value for df >= 10). Seeds are fixed, so each test is deterministic; a sampler
that is truly uniform would fail it for only 1 seed in 1000, while a biased one (for example one that
redraws ops that failed repair, under-representing them by even 15%) exceeds it by a wide margin at
the sample sizes used.
"""
from __future__ import annotations

import math
from collections import Counter

Z_999 = 3.090232  # standard normal quantile at 0.999


def chi2_critical(df: int, z: float = Z_999) -> float:
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi2_uniform(counts: Counter, categories: list) -> tuple[float, float]:
    """(statistic, critical value) for counts over `categories` against the uniform law."""
    n = sum(counts[c] for c in categories)
    expected = n / len(categories)
    stat = sum((counts[c] - expected) ** 2 / expected for c in categories)
    return stat, chi2_critical(len(categories) - 1)


def chi2_expected(counts: Counter, weights: Counter, min_expected: float = 5.0) -> tuple[float, float]:
    """(statistic, critical value) for counts against the law proportional to `weights` (a projection
    of a uniform law onto a coarser key: each key weighs as many points as map to it). Categories
    expected fewer than `min_expected` times are pooled into one, as the chi-square approximation needs."""
    n, total = sum(counts.values()), sum(weights.values())
    cells: list[tuple[float, int]] = []
    pooled_e, pooled_o = 0.0, 0
    for key, w in weights.items():
        e = n * w / total
        if e < min_expected:
            pooled_e, pooled_o = pooled_e + e, pooled_o + counts[key]
        else:
            cells.append((e, counts[key]))
    if pooled_e > 0:
        cells.append((pooled_e, pooled_o))
    stat = sum((o - e) ** 2 / e for e, o in cells)
    return stat, chi2_critical(max(len(cells) - 1, 1))
