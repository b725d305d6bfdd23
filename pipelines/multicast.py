"""NVLink multicast off in every process this package starts or launches (NCCL, PyTorch, NVSHMEM).

On shared multi-GPU hosts a program that uses NVLink multicast (NCCL's NVLS algorithms, PyTorch's
symmetric-memory multimem operations, NVSHMEM's NVLS) can put the host's GPUs out of service for a day
or more. What it keeps: the three switches, set in a LocalCluster's workers (`build/cluster.py`) and,
unless the user set them, in each train-grpo rank before torch.distributed starts. What it simplifies:
nothing is probed; the cost is NCCL's non-NVLS all-reduce, which DDP of this size does not notice.
"""
from __future__ import annotations

import os

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def keep_off(environ: dict[str, str] | None = None) -> None:
    """Set each switch in `environ` (default os.environ) unless it is set already."""
    env = os.environ if environ is None else environ
    for k, v in NO_MULTICAST.items():
        env.setdefault(k, v)
