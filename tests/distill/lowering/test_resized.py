"""Lowered modules read their sizes from their tensors: the same module passes on resized twins.

A twin (synth's `Problem.twin(..., keep_constructor=True)`) is the same graph with every size
redrawn but those the constructor reads (nn.Linear(E, F), conv channels), which a fixed
`ModelNew.__init__` bakes in: the check the verifier runs as `checks.resized`. The sampled
problems are those without constructor sizes (a spread of kernel families); a linear and a conv
problem are added by name.
"""
from __future__ import annotations

import re

import pytest

import synth
from distill.lowering import lower
from distill.lowering.ir import read_program
from distill.lowering.selfcheck import check
from tests.distill.lowering.conftest import verify_all
from tests.limits import CALL_LIMIT_S


def _init(source: str) -> str:
    return source.split("def __init__")[1].split("def forward")[0]


def _resizable(level: int, n: int, seed: int) -> list:
    """Problems without constructor sizes, one per leading op family (a spread of kernel families)."""
    seen, out = set(), []
    for p in synth.sample(n, level=level, seed=seed):
        prog = read_program(p)
        fams = tuple(sorted({o.template for o in prog.ops}))
        if any(o.params for o in prog.ops) or fams in seen:
            continue
        seen.add(fams)
        out.append(p)
    return out


@pytest.fixture(scope="module")
def problems():
    # cat (a dim drawn as 1 that a twin makes larger), attention, pools, reductions, norms, scans
    ops = [["cat", "softsign"], ["sdpa", "relu"], ["adaptive_max_pool2d", "log"], ["avg_pool2d", "exp"], ["logsumexp", "mul"],
           ["softmax", "add"], ["cumsum", "abs"]]
    chosen = [synth.sample(1, level=2, seed=3, ops=o)[0] for o in ops]
    kept = [p for p in chosen if _init(p.source) == _init(p.twin(p.profile, 1).source)] + _resizable(5, 12, 5)[:1]
    # constructor sizes: nn.Linear(96, F) after gelu; nn.Conv2d(2, C, ...) then relu
    return kept + [synth.sample(1, level=2, seed=1, ops=o)[0] for o in (["linear", "gelu"], ["conv2d", "relu"])]


def test_lowered_source_reads_sizes_and_has_no_device_branches(problems):
    for p in problems:
        src = lower(p).source
        forward = src.split("def forward")[1]
        assert "on_cpu" not in src and "device.type" not in src and "TRITON_INTERPRET" not in src
        assert re.search(r"^\s+[\w, ]+ = x\d+\.shape$", forward, re.M), forward[:600]
        # no literal problem size in a launch: every extent is a name or an expression of names
        for size in {d for shape in p.input_shapes for d in shape if d > 16}:
            assert not re.search(rf"\b(n_elements|n_rows|R|M|N|K|P|L|S)={size}\b", forward), (p.ops, size)


def test_lowered_module_passes_two_resized_twins(problems):
    assert len(problems) >= 8, [p.ops for p in problems]
    assert {"linear", "conv2d"} <= {op for p in problems for op in p.ops}
    for p in problems:
        source = lower(p).source
        for seed in (1, 2):
            twin = p.twin(p.profile, seed, keep_constructor=True)
            assert twin.input_shapes != p.input_shapes and _init(twin.source) == _init(p.source)
            res = check(twin.source, source)
            assert res.ok, f"{p.ops} on twin {seed} {twin.input_shapes}: {res.message}"


@pytest.mark.slow  # a pool of its own: ~20 s of sandbox start-up
def test_verifier_with_resized_required_passes_lowered_modules(problems):
    from distill.verifier import VerifierPool

    picked = problems[:2] + problems[-2:]  # cat over a dim drawn as 1, attention, linear, conv
    with VerifierPool(workers=2, device="cpu", timeout=CALL_LIMIT_S, resized="required") as pool:
        verdicts, bad = verify_all(pool, picked, [lower(p).source for p in picked])
    assert not bad, "\n".join(bad)
    assert all(v.checks["resized"]["status"] == "pass" for v in verdicts), [v.checks["resized"] for v in verdicts]
