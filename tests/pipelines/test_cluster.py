"""`tritonforge build --scheduler` with workers started by dask's own CLI (`dask scheduler`, `dask worker`)
on 127.0.0.1: the same rows as a LocalCluster build, a relative --out, the dashboard, and the errors a
cluster can cause (no GPU resource, a worker that cannot see --out) before any task runs."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.build.cluster import NO_MULTICAST, close_local, connect
from pipelines.build.config import parse_config
from tests.pipelines.buildkit import config_doc, rows, write_config
from tests.limits import wall_bound

DASK = Path(sys.executable).parent / "dask"
ENV = {**os.environ, "TRITON_INTERPRET": "1"}


@contextlib.contextmanager
def dask_cluster(root: Path, workers: dict[str, list[str]]) -> Iterator[str]:
    """A `dask scheduler` and one `dask worker` per entry, each worker run in its own folder under `root`
    (its cwd), its command prefixed by the entry's list; yields the scheduler's address."""
    procs: list[subprocess.Popen] = []
    root.mkdir()
    sched = root / "scheduler.json"

    def start(cmd: list[str], cwd: Path, log: str) -> None:
        with (root / log).open("w") as fh:
            procs.append(subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=fh, stderr=subprocess.STDOUT,
                                          start_new_session=True))

    try:
        start([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(sched),
               "--dashboard-address", "127.0.0.1:0"], root, "scheduler.log")
        deadline = time.monotonic() + 60
        while not (sched.exists() and sched.read_text().strip()):
            assert time.monotonic() < deadline, (root / "scheduler.log").read_text()
            time.sleep(0.2)
        address = json.loads(sched.read_text())["address"]
        for name, prefix in workers.items():
            (root / name).mkdir()
            start([*prefix, str(DASK), "worker", address, "--nthreads", "1", "--name", name], root / name,
                  f"{name}.log")
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(len(workers), timeout=120)
        yield address
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _cli_build(cfg: Path, out: str, address: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "build", str(cfg), "--out", out,
                           "--scheduler", address], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)


def _dashboard(stderr: str) -> str:
    link = next(line.split(": ", 1)[1] for line in stderr.splitlines() if line.startswith("dask dashboard: "))
    assert link.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(link, timeout=30) as page:
        return page.read().decode()


@pytest.mark.slow
def test_dask_cli_workers_build_the_rows_of_a_local_cluster(built_dataset, tmp_path):
    # the session's LocalCluster build (tests/conftest.py) and its config: size 4 in shards of 2
    cfg = built_dataset.parent / "build.toml"
    run = tmp_path / "run"
    run.mkdir()
    with dask_cluster(tmp_path / "cluster", {"w1": [], "w2": []}) as address:
        # a relative --out, from a folder that is neither worker's cwd: the workers write where it points
        done = _cli_build(cfg, "rel/out", address, run)
        assert done.returncode == 0, done.stderr
        page = _dashboard(done.stderr)  # the scheduler's, served while it runs
        assert "bokeh" in page.lower() and "needs bokeh" not in page.lower()

        # verification on cuda with no worker holding the GPU resource: an error naming the fix, at once
        cuda = tmp_path / "cuda.toml"
        cuda.write_text(cfg.read_text().replace('device = "cpu"', 'device = "cuda"'))
        t0 = time.monotonic()
        refused = _cli_build(cuda, "cuda-out", address, run)
        assert refused.returncode == 2 and "--resources GPU=1" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and time.monotonic() - t0 < wall_bound(60)
        assert not (run / "cuda-out").exists()
    assert not list((tmp_path / "cluster").glob("w*/rel"))  # nothing under a worker's own cwd
    assert "| SFT rows (verified pass) | 4 |" in done.stdout

    assert rows(run / "rel" / "out") == rows(built_dataset)


def test_local_cluster_dashboard_serves(tmp_path):
    cfg = parse_config(config_doc(tmp_path / "answers.jsonl"))
    client, cluster = connect(cfg, None)
    try:
        with urllib.request.urlopen(client.dashboard_link, timeout=30) as page:
            text = page.read().decode().lower()
        # NVLink multicast off in every worker it starts (pipelines.build.cluster.NO_MULTICAST)
        envs = client.run(lambda: {k: os.environ.get(k) for k in NO_MULTICAST})
        assert envs and all(e == NO_MULTICAST for e in envs.values()), envs
    finally:
        client.close()
        cluster.close()
    assert client.dashboard_link.startswith("http://127.0.0.1:")
    assert "bokeh" in text and "needs bokeh" not in text


@pytest.mark.slow
def test_a_worker_that_cannot_see_out_is_refused_before_any_task(tmp_path):
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare --mount (root) to give a worker its own view of the filesystem")
    cfg = write_config(tmp_path, size=4, shard_size=2)
    shared = tmp_path / "shared"
    shared.mkdir()
    # w2 sees an empty tmpfs where --out's parent is: a worker on another host without the shared disk
    blind = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f'mount -t tmpfs tmpfs "{shared}" && exec "$0" "$@"']
    with dask_cluster(tmp_path / "cluster", {"w1": [], "w2": blind}) as address:
        refused = _cli_build(cfg, str(shared / "out"), address, tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "do not see this folder" in refused.stderr and "Traceback" not in refused.stderr
    assert not list((shared / "out").rglob("*.parquet"))  # no task ran


def test_a_cluster_whose_close_times_out_has_its_workers_killed_not_the_build_failed(tmp_path, capsys):
    """Seen on a 2-core box running five test lanes: a build wrote every row and its manifest, then
    LocalCluster.close() raised TimeoutError and the command exited 1. The fault is injected here (the
    real close raising as it did there); the workers are real processes and must not outlive it."""
    import psutil

    client, cluster = connect(parse_config(config_doc(tmp_path / "answers.jsonl")), None)
    pids = [w.pid for w in cluster.workers.values()]
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    client.close()
    real_close = cluster.close
    calls = []

    def timed_out(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError
        return real_close(*args, **kwargs)

    cluster.close = timed_out
    close_local(cluster)   # does not raise
    assert "did not close in time" in capsys.readouterr().err
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert calls == [1, 1] and cluster.status.name == "closed"   # closed again once its workers were gone

