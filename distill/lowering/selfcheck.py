"""A quick in-process check of a lowered module against its reference (development and benchmarks).

Not the verifier: no sandbox, no provenance, no policy. It builds `Model` and `ModelNew` under the
same seed, runs both on the same inputs and compares with the verifier's tolerance. The tests use the
real verifier (`distill.verifier`); this exists so the lowering can be debugged and benchmarked on a
machine (the GPU box) where one process should do everything.
"""
from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class CheckResult:
    ok: bool
    message: str = ""
    max_abs_err: float = 0.0


def load_module(source: str, name: str) -> types.ModuleType:
    """Import `source` from a real file (Triton reads kernel source through `inspect`), then remove the
    file: its lines stay pinned in `linecache` (an entry without an mtime, as for a loader's module,
    which `linecache.checkcache` keeps), so `inspect` and tracebacks still read them. A test run called
    this about 2,000 times an hour and left every file in /tmp."""
    fd, path = tempfile.mkstemp(suffix=".py", prefix=f"{name}_")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(source)
        linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
        spec = importlib.util.spec_from_file_location(f"{name}_{os.path.basename(path)[:-3]}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    finally:
        os.unlink(path)
    return mod


def build(problem_source: str, candidate_source: str, device: str, seed: int = 0) -> tuple[Any, Any, types.ModuleType]:
    ref_mod = load_module(problem_source, "tf_problem")
    new_mod = load_module(candidate_source, "tf_candidate")
    torch.manual_seed(seed)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).to(device)
    torch.manual_seed(seed)
    new = new_mod.ModelNew(*ref_mod.get_init_inputs()).to(device)
    return ref, new, ref_mod


def _as_list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[bool, str, float]:
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False, f"shape/dtype {tuple(out.shape)} {out.dtype} vs {tuple(ref.shape)} {ref.dtype}", float("inf")
    if not ref.dtype.is_floating_point:
        bad = int((out != ref).sum())
        return bad == 0, f"{bad} mismatches", float(bad)
    o, r = out.double().cpu(), ref.double().cpu()
    if not torch.equal(torch.isfinite(o), torch.isfinite(r)):
        return False, "non-finite values differ", float("inf")
    fin = torch.isfinite(r)
    diff = (o[fin] - r[fin]).abs()
    rms = float(r[fin].pow(2).mean().sqrt()) if fin.any() else 0.0
    err = float(diff.max()) if diff.numel() else 0.0
    norm = float(diff.pow(2).sum().sqrt()) / max(float(r[fin].pow(2).sum().sqrt()), 1e-6)
    ok = norm <= 2e-3 and bool((diff <= 1e-2 * max(rms, 1e-6) + 1e-2 * r[fin].abs()).all())
    return ok, f"max abs err {err:.3g}, norm rel err {norm:.3g}", err


def check(problem_source: str, candidate_source: str, device: str = "cpu", trials: int = 2) -> CheckResult:
    """Run both modules on `trials` fresh input sets; ok when every output agrees."""
    ref, new, ref_mod = build(problem_source, candidate_source, device)
    worst = 0.0
    for t in range(trials):
        torch.manual_seed(1000 + t)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
        with torch.no_grad():
            want = _as_list(ref(*inputs))
            got = _as_list(new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
        if len(got) != len(want):
            return CheckResult(False, f"{len(got)} outputs, expected {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            ok, msg, err = compare(g, w)
            worst = max(worst, err)
            if not ok:
                return CheckResult(False, f"trial {t} output {i}: {msg}", err)
    return CheckResult(True, "", worst)
