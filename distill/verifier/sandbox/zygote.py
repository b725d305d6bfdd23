"""Imported by the forkserver (the zygote) once: pays every first-use cost workers would repeat.

Triton's interpreter, torch's lazily imported dispatch machinery (sympy & co.) and the list of
ATen kernels to block are all set up here, so a fresh worker is a fork plus its own confinement.
No CUDA call is made: forking a process that initialised CUDA is unsafe.
"""
from __future__ import annotations

import os

import torch
import triton  # noqa: F401 - preloaded for the forks

from distill.verifier import reference  # noqa: F401 - preloaded for the forks (references are forked here too)
from distill.verifier.sandbox import inductor_rt, provenance, worker

if os.environ.get("TRITON_INTERPRET") == "1":
    # ~2 s once here rather than in every worker (each preloads it anyway, before its guard): the CPU lane
    # only, where no import can touch CUDA; a GPU worker pays it after the fork
    inductor_rt.preload()
    # Small sizes on purpose: no torch/OpenMP thread pool may exist in a process that forks.
    worker._warm_up(torch.device("cpu"), threads=False)
else:
    with provenance.AuditMode():
        torch.empty(8).view(2, 4).t().clone()
provenance.backend_names(("CPU", "CUDA"))
