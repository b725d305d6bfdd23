"""The build's cluster on a multi-GPU host, checked on the CPU: a LocalCluster gives each worker its own
GPUs (CUDA_VISIBLE_DEVICES) and NVLink multicast off; a `--scheduler` worker that sees more GPUs than it
declares is refused with the fix."""
from __future__ import annotations

import pytest

from pipelines.build.cluster import NO_MULTICAST, ClusterError, _pinned_cluster, check_pinned, worker_devices


def test_worker_devices_one_gpu_each_then_round_robin():
    assert worker_devices(4, 1, ["0", "1", "2", "3"]) == ["0", "1", "2", "3"]
    assert worker_devices(2, 2, ["4", "5", "6", "7"]) == ["4,5", "6,7"]      # the parent's own selection kept
    assert worker_devices(3, 1, ["0", "1"]) == ["0", "1", "0"]                # fewer GPUs: shared
    with pytest.raises(ClusterError, match="no GPU is visible"):
        worker_devices(1, 1, [])


def test_unpinned_gpu_worker_is_refused():
    workers = {"tcp://a:1": {"name": "w0", "resources": {"GPU": 1}}, "tcp://a:2": {"name": "w1", "resources": {}}}
    check_pinned("tcp://s:1", workers, {"tcp://a:1": ("3", 8), "tcp://a:2": (None, 8)})   # pinned; CPU-only worker
    check_pinned("tcp://s:1", workers, {"tcp://a:1": (None, 1), "tcp://a:2": (None, None)})  # a one-GPU host
    with pytest.raises(ClusterError, match=r"worker w0 .* declares GPU=1 but sees 8 GPUs .*CUDA_VISIBLE_DEVICES=i"):
        check_pinned("tcp://s:1", workers, {"tcp://a:1": (None, 8), "tcp://a:2": (None, 8)})
    with pytest.raises(ClusterError, match="sees 2 GPUs"):
        check_pinned("tcp://s:1", workers, {"tcp://a:1": ("0,1", 8), "tcp://a:2": (None, 8)})


def _env(names):
    import os

    return {k: os.environ.get(k) for k in names}


def test_local_cluster_workers_pinned_and_multicast_off(tmp_path):
    names = ["CUDA_VISIBLE_DEVICES", *NO_MULTICAST]
    cluster = _pinned_cluster([{**NO_MULTICAST, "CUDA_VISIBLE_DEVICES": d} for d in ("0", "1")], threads_per_worker=1,
                              processes=True, dashboard_address=None, resources={"GPU": 1}, silence_logs=40,
                              memory_limit=0.5)
    from dask.distributed import Client

    try:
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=60)
            seen = sorted(tuple(v.items()) for v in client.run(_env, names).values())
            info = client.scheduler_info()["workers"].values()
            assert all(w["resources"] == {"GPU": 1} and w["nthreads"] == 1 for w in info)
    finally:
        cluster.close()
    assert seen == [tuple({"CUDA_VISIBLE_DEVICES": d, **NO_MULTICAST}.items()) for d in ("0", "1")]


def test_timing_core_follows_the_workers_own_gpu(monkeypatch):
    """A worker pinned to GPU 3 times on GPU 3's core, not GPU 0's: its cuda:0 is mapped to the host's GPU."""
    import os

    from distill.verifier.gate import timing_core

    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    pinned = timing_core(0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert pinned == timing_core(3) and timing_core(0) in allowed
    if len(allowed) > 1 and not os.path.isdir("/sys/bus/pci/drivers/nvidia"):
        assert pinned != timing_core(0)


def test_keep_off_sets_the_switches_but_keeps_a_users_own():
    from pipelines.multicast import keep_off

    env = {"NCCL_NVLS_ENABLE": "1"}
    keep_off(env)
    assert env == {**NO_MULTICAST, "NCCL_NVLS_ENABLE": "1"}
