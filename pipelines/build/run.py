"""Run the build on dask.distributed: a LocalCluster of processes by default, or any scheduler.

Order: held-out shards are sampled first (their dag_hashes are excluded from training), then every
training shard is sampled, taught and verified. Tasks whose done markers still match their outputs
are not recomputed, so a rerun after any crash (client or worker, at any moment) or after a shard
was deleted or damaged finishes the same dataset. The folder is checked first (`folder.py`): a
folder that is not this build's is refused untouched. Then the cluster's workers are checked
(`cluster.py`), the folder is claimed (one build at a time holds it), and every worker must see it.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from curriculum.shards import ShardError
from pipelines.build.cluster import check_shared, check_workers, close_local, connect
from pipelines.build.config import BuildConfig
from pipelines.build.folder import FolderError, check_folder, claim
from pipelines.build.manifest import write_manifest
from pipelines.build.plan import plan
from pipelines.build.tasks import sample_shard, teach_verify_shard

TEACH_GPU_CLAIM = 1 / 256  # of the `GPU` resource; [cluster] threads_per_worker bounds the tasks at once


def build(cfg: BuildConfig, out: str | Path, scheduler: str | None = None, progress: bool = True,
          card: bool = False) -> dict[str, Any]:
    """Build (or resume) the dataset in `out` (and its dataset card, with `card`); returns the manifest.
    Raises FolderError (a UsageError) when `out` is not this build's folder, another build holds it,
    or a shard there cannot be read, and ClusterError (one too) when the workers cannot run it. The
    card is written under the folder's lock too."""
    out = Path(out).absolute()  # what the workers are told: a relative path would land in each one's cwd
    check_folder(cfg, out)  # read-only: a folder that is not this build's is refused before a cluster starts
    t0 = time.perf_counter()
    client, cluster = connect(cfg, scheduler)
    try:
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        check_workers(client, cfg)
        with claim(cfg, out):
            check_shared(client, out)
            try:
                manifest = _run(cfg, out, client, progress, t0)
            except ShardError as exc:
                raise FolderError(str(exc)) from exc
            if card:
                from pipelines.publish.card import write_card

                write_card(out, manifest)
            return manifest
    finally:
        client.close()
        if cluster is not None:
            close_local(cluster)


def _report(r: dict[str, Any], bar) -> None:
    if r.get("stale"):
        bar.write(f"build: {r['shard']}: ran again, its done marker did not hold: {r['stale']}", file=sys.stderr)


def _run(cfg: BuildConfig, out: Path, client, progress: bool, t0: float) -> dict[str, Any]:
    from dask.distributed import as_completed
    from tqdm import tqdm

    shards = plan(cfg)
    tag = cfg.digest()
    # A teach task claims a sliver of a GPU: enough to land only on GPU workers, not enough to keep a
    # worker's other threads from teaching beside it. They share the worker's one verifier pool, which
    # queues their jobs; one task a GPU left the pool's workers idle at a shard's tail (H100, 16
    # problems a shard: 2.8 of 12 workers busy on average).
    gpu = {"GPU": TEACH_GPU_CLAIM} if cfg.verify.device == "cuda" else None
    held = [s for s in shards if s.kind == "heldout"]
    train = [s for s in shards if s.kind == "stage"]
    bar = tqdm(total=len(held) + 2 * len(train), desc="build", unit="task", file=sys.stderr, disable=not progress)
    results: dict[str, dict[str, Any]] = {}
    futs = [client.submit(sample_shard, s, cfg, str(out), key=f"sample-{s.name}-{tag}") for s in held]
    for fut in as_completed(futs):
        r = fut.result()
        results[f"sample:{r['shard']}"] = r
        _report(r, bar)
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
        _report(r, bar)
        bar.update()
    bar.close()
    return write_manifest(cfg, out, results, time.perf_counter() - t0)
