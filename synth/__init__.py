"""synth: draw operator graphs uniformly at a chosen difficulty and render them as KernelBench problems.

The public names load on first use (PEP 562): the sampler imports torch (2-3 s), and `tritonforge
sample --help` or `show` should not pay for it.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "CatalogError": "synth.catalog", "OpSpec": "synth.catalog", "load_catalog": "synth.catalog",
    "operators": "synth.catalog", "Problem": "synth.problem", "ProfileError": "synth.profiles",
    "load_profile": "synth.profiles", "profile_names": "synth.profiles", "SampleConfig": "synth.sampler",
    "SamplingError": "synth.sampler", "dedup": "synth.sampler", "sample": "synth.sampler",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'synth' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
