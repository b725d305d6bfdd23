"""Run the build on dask.distributed: a LocalCluster of processes by default, or any scheduler.

Order: held-out shards are sampled first (their dag_hashes are excluded from training), then every
training shard is sampled, taught and verified. Shards whose outputs exist are not recomputed, so a
rerun after any crash (client or worker, at any moment) finishes the same dataset.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pipelines.build.config import BuildConfig, ConfigError
from pipelines.build.manifest import write_manifest
from pipelines.build.plan import plan
from pipelines.build.tasks import sample_shard, teach_verify_shard
from synth.atomic_write import atomic_write_text

STAMP = "build.json"


def _check_stamp(cfg: BuildConfig, out: Path) -> None:
    stamp = out / STAMP
    if stamp.exists():
        old = json.loads(stamp.read_text())
        if old.get("config_digest") != cfg.digest():
            raise ConfigError(f"{out} was built with another config (digest {old.get('config_digest')}, this one is "
                              f"{cfg.digest()}); use a new --out or delete the folder")
    else:
        atomic_write_text(stamp, json.dumps({"config_digest": cfg.digest(), "config": cfg.to_dict()}, indent=1,
                                            default=list))


def _client(cfg: BuildConfig, scheduler: str | None):
    import dask
    from dask.distributed import Client, LocalCluster

    # The verifier pool and vLLM start child processes: dask's default daemonic workers cannot.
    dask.config.set({"distributed.worker.daemon": False})
    if scheduler:
        return Client(scheduler), None
    resources = {"GPU": cfg.cluster.gpus_per_worker} if cfg.cluster.gpus_per_worker else None
    cluster = LocalCluster(n_workers=cfg.cluster.n_workers, threads_per_worker=cfg.cluster.threads_per_worker,
                           processes=True, dashboard_address="127.0.0.1:0", resources=resources,
                           silence_logs=40)
    return Client(cluster), cluster


def build(cfg: BuildConfig, out: str | Path, scheduler: str | None = None, progress: bool = True) -> dict[str, Any]:
    from dask.distributed import as_completed
    from tqdm import tqdm

    out = Path(out)
    _check_stamp(cfg, out)
    shards = plan(cfg)
    t0 = time.perf_counter()
    client, cluster = _client(cfg, scheduler)
    try:
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        tag = cfg.digest()
        gpu = {"GPU": 1} if cfg.verify.device == "cuda" else None
        held = [s for s in shards if s.kind == "heldout"]
        train = [s for s in shards if s.kind == "stage"]
        bar = tqdm(total=len(held) + 2 * len(train), desc="build", unit="task", file=sys.stderr, disable=not progress)
        results: dict[str, dict[str, Any]] = {}
        futs = [client.submit(sample_shard, s, cfg, str(out), key=f"sample-{s.name}-{tag}") for s in held]
        for fut in as_completed(futs):
            r = fut.result()
            results[f"sample:{r['shard']}"] = r
            bar.update()
        exclude = frozenset(h for r in results.values() for h in r["dag_hashes"])
        futs = []
        for s in train:
            sampled = client.submit(sample_shard, s, cfg, str(out), exclude, key=f"sample-{s.name}-{tag}")
            futs.append(sampled)
            futs.append(client.submit(teach_verify_shard, s, cfg, str(out), sampled, key=f"teach-{s.name}-{tag}",
                                      resources=gpu))
        for fut in as_completed(futs):
            r = fut.result()
            results[("teach:" if "statuses" in r else "sample:") + r["shard"]] = r
            bar.update()
        bar.close()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return write_manifest(cfg, out, shards, results, time.perf_counter() - t0)
