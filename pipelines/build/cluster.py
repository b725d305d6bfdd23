"""The build's dask cluster: a LocalCluster of processes, or the workers of a running scheduler.

Either is checked before any task is submitted.

Workers joined to a scheduler were started by someone else (`dask worker ADDRESS`), so what the build
needs of them is checked first, and each failure names its fix: a worker at all (waited for
WORKER_WAIT_S), the `GPU` resource when `[verify] device = "cuda"` (teach tasks ask for it, and a task
no worker can take would wait forever), a GPU worker that sees more GPUs than it declares (its verifier
would time kernels on GPUs other workers use), and the --out folder, seen by every worker at the same path.

A LocalCluster verifying on cuda gives worker i its own `gpus_per_worker` GPUs through
CUDA_VISIBLE_DEVICES (round robin over the visible ones when there are fewer; as dask-cuda's
LocalCUDACluster does), so each worker's verifier pool, which uses every GPU it sees, uses cuda:0 of
its own. Every LocalCluster worker gets NO_MULTICAST in its environment.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from pipelines.build.config import BuildConfig
from pipelines.build.folder import STAMP
from pipelines.multicast import NO_MULTICAST  # in every LocalCluster worker's environment
from synth.cli_checks import UsageError

WORKER_WAIT_S = 60.0
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # one entry per GPU of the host, read without touching CUDA


class ClusterError(UsageError):
    """The cluster cannot run this build; the message says what to start or change (the CLI exits 2)."""


def connect(cfg: BuildConfig, scheduler: str | None):
    """(client, the LocalCluster to close or None)."""
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler), None
    n, k = cfg.cluster.n_workers, cfg.cluster.gpus_per_worker
    resources = {"GPU": k} if k else None
    kwargs = dict(threads_per_worker=cfg.cluster.threads_per_worker, processes=True,
                  dashboard_address="127.0.0.1:0", resources=resources, silence_logs=40)
    if cfg.verify.device != "cuda" or not k:
        cluster = LocalCluster(n_workers=n, env=dict(NO_MULTICAST), **kwargs)
        return Client(cluster), cluster
    envs = [{**NO_MULTICAST, "CUDA_VISIBLE_DEVICES": devs} for devs in worker_devices(n, k, visible_gpus())]
    if n * k > len(visible_gpus()):
        print(f"build: {n} workers x {k} GPU(s) on {len(visible_gpus())} visible GPU(s): workers share GPUs, "
              "and their timings disturb each other", file=sys.stderr)
    cluster = _pinned_cluster(envs, memory_limit=1.0 / n, **kwargs)
    client = Client(cluster)
    try:
        client.wait_for_workers(n, timeout=WORKER_WAIT_S)
    except TimeoutError:
        client.close()
        cluster.close()
        raise ClusterError(f"[cluster] n_workers = {n}: not all workers started within {WORKER_WAIT_S:g} s") from None
    return client, cluster


def close_local(cluster) -> None:
    """Close a LocalCluster this build started. On a loaded machine its close can time out (seen once on
    a 2-core box running five test lanes, after every row and the manifest were written; which step
    was slow was not found): the timeout is reported, not raised, and the workers still alive are
    killed with their children."""
    import psutil

    pids = [w.pid for w in cluster.workers.values() if w.pid]  # Nanny.pid: its worker process
    try:
        cluster.close()
    except TimeoutError:
        family = []
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                family += [*proc.children(recursive=True), proc]
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(family, timeout=10)
        print(f"build: the local dask cluster did not close in time; {len(family)} of its processes were killed",
              file=sys.stderr)
        with contextlib.suppress(Exception):  # its workers are gone: what is left closes quickly, or is dropped
            cluster.close()


def visible_gpus() -> list[str]:
    """This process's GPUs as CUDA_VISIBLE_DEVICES names them (indices or UUIDs), else 0..count-1."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def worker_devices(n_workers: int, gpus_per_worker: int, visible: list[str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each worker: worker i takes the next `gpus_per_worker` GPUs, round robin."""
    if not visible:
        raise ClusterError("[verify] device = \"cuda\", but no GPU is visible here")
    return [",".join(visible[(i * gpus_per_worker + j) % len(visible)] for j in range(gpus_per_worker))
            for i in range(n_workers)]


def _pinned_cluster(envs: list[dict[str, str]], **kwargs):
    """A LocalCluster whose worker i runs with envs[i] (set by its nanny before the worker starts, so
    before CUDA reads CUDA_VISIBLE_DEVICES). LocalCluster gives every worker the same options; SpecCluster's
    `new_worker_spec` (what `scale` calls) is where per-worker options go."""
    from dask.distributed import LocalCluster

    class PinnedCluster(LocalCluster):
        def new_worker_spec(self):
            name = min(set(range(len(self.worker_spec) + 1)) - set(self.worker_spec))
            options = {**self.new_spec["options"], "env": envs[name % len(envs)]}
            return {name: {"cls": self.new_spec["cls"], "options": options}}

    cluster = PinnedCluster(n_workers=0, **kwargs)
    cluster.scale(len(envs))
    return cluster


def gpu_view() -> tuple[str | None, int | None]:
    """(CUDA_VISIBLE_DEVICES, the host's GPU count from the driver's /proc entries, None if unknown):
    run on each worker; it leaves CUDA uninitialised there (the verifier's processes start later)."""
    try:
        host = len(os.listdir(NVIDIA_GPUS))
    except OSError:
        host = None
    return os.environ.get("CUDA_VISIBLE_DEVICES"), host


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
    if cfg.verify.device == "cuda":
        check_pinned(where, workers, client.run(gpu_view))


def check_pinned(where: str, workers: dict, views: dict) -> None:
    """Each GPU worker sees no more GPUs than its `GPU` resource declares; ClusterError naming the fix.
    A verifier pool uses every GPU it sees, so an unpinned worker on a multi-GPU host would time its
    kernels on GPUs other workers' kernels run on."""
    for addr, (env, host) in sorted(views.items()):
        declared = workers.get(addr, {}).get("resources", {}).get("GPU", 0)
        seen = len([d for d in env.split(",") if d.strip()]) if env is not None else host
        if declared >= 1 and seen is not None and seen > declared:
            name = workers[addr].get("name", addr)
            raise ClusterError(f"--scheduler {where}: worker {name} ({addr}) declares GPU={declared:g} but sees {seen} "
                               f"GPUs (CUDA_VISIBLE_DEVICES={env if env is not None else 'unset'}); its verifier would "
                               f"time kernels on the other workers' GPUs: start one worker per GPU with "
                               f"`CUDA_VISIBLE_DEVICES=i dask worker {where} --nthreads 1 --resources GPU=1`")


def check_shared(client, out: Path) -> None:
    """Every worker sees the --out folder (by its build stamp, written by now); ClusterError if not."""
    seen = client.run(os.path.isfile, str(out / STAMP))
    blind = sorted(addr for addr, ok in seen.items() if not ok)
    if blind:
        raise ClusterError(f"--out {out}: worker(s) {', '.join(blind)} do not see this folder (no {STAMP} there); "
                           "--out must be on a filesystem every worker shares, at the same path")
