"""The build's dask cluster: a LocalCluster of processes, or the workers of a running scheduler,
checked before any task is submitted.

Workers joined to a scheduler were started by someone else (`dask worker ADDRESS`), so what the build
needs of them is checked first, and each failure names its fix: a worker at all (waited for
WORKER_WAIT_S), the `GPU` resource when `[verify] device = "cuda"` (teach tasks ask for it, and a task
no worker can take would wait forever), and the --out folder, seen by every worker at the same path.
"""
from __future__ import annotations

import os
from pathlib import Path

from pipelines.build.config import BuildConfig, ConfigError
from pipelines.build.folder import STAMP

WORKER_WAIT_S = 60.0


class ClusterError(ConfigError):
    """The cluster cannot run this build; the message says what to start or change."""


def connect(cfg: BuildConfig, scheduler: str | None):
    """(client, the LocalCluster to close or None)."""
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler), None
    resources = {"GPU": cfg.cluster.gpus_per_worker} if cfg.cluster.gpus_per_worker else None
    cluster = LocalCluster(n_workers=cfg.cluster.n_workers, threads_per_worker=cfg.cluster.threads_per_worker,
                           processes=True, dashboard_address="127.0.0.1:0", resources=resources,
                           silence_logs=40)
    return Client(cluster), cluster


def check_workers(client, cfg: BuildConfig) -> None:
    """The cluster has workers, with a GPU each where verification needs one; ClusterError if not."""
    where = client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except TimeoutError:
        raise ClusterError(f"--scheduler {where}: no worker joined within {WORKER_WAIT_S:g} s; start one with "
                           f"`dask worker {where}`") from None
    workers = client.scheduler_info()["workers"]
    if cfg.verify.device == "cuda" and not any(w.get("resources", {}).get("GPU", 0) >= 1 for w in workers.values()):
        raise ClusterError(f"[verify] device = \"cuda\", but none of the {len(workers)} worker(s) of {where} has "
                           f"the GPU resource its teach tasks ask for; start one worker per GPU with "
                           f"`CUDA_VISIBLE_DEVICES=i dask worker {where} --resources GPU=1` (or verify on \"cpu\")")


def check_shared(client, out: Path) -> None:
    """Every worker sees the --out folder (by its build stamp, written by now); ClusterError if not."""
    seen = client.run(os.path.isfile, str(out / STAMP))
    blind = sorted(addr for addr, ok in seen.items() if not ok)
    if blind:
        raise ClusterError(f"--out {out}: worker(s) {', '.join(blind)} do not see this folder (no {STAMP} there); "
                           "--out must be on a filesystem every worker shares, at the same path")
