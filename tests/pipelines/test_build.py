"""The dask build on a real LocalCluster with the real verifier: every table, resume, and kill -9."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.build.config import load_config
from pipelines.build.run import build
from tests.filemodes import modes, wrong
from tests.pipelines.buildkit import rows


def _ids(folder: Path) -> set:
    return {h for f in folder.rglob("*.parquet") for h in pq.read_table(f, columns=["problem_id"]).column(0).to_pylist()}


def test_build_writes_every_table_then_resumes(built_dataset, tmp_path, capsys):
    # the session's build (tests/conftest.py): size 4 in shards of 2, made and carded under umask 0o022,
    # which its workers were started under: every output, card included, must be 0o644
    out = built_dataset
    m = json.loads((out / "manifest.json").read_text())  # what build() returned, as it wrote it
    assert wrong(out, 0o644, 0o755) == {}
    assert {"build.json", "manifest.json", "README.md", ".done/", "plots/verdicts.png"} <= set(modes(out))
    c = m["counts"]
    assert c["rl"] == {"stage=1": 4} and c["heldout"] == {"level=1": 2}
    assert c["sft"] == 4 and m["verdicts"] == {"pass": 4}  # real verifier, honest relu kernels
    assert c["problems"] == 6
    assert not (_ids(out / "heldout") & _ids(out / "rl"))  # held-out disjoint from training
    first = rows(out)
    assert len(first["sft"]) == 4 and len(first["samples"]) == 4
    again = tmp_path / "out"  # resumed in a copy: the shared build stays as it was made
    shutil.copytree(out, again)
    m2 = build(load_config(out.parent / "build.toml"), again, progress=False)
    assert "dask dashboard: http://127.0.0.1:" in capsys.readouterr().err  # every build prints its link
    assert m2["shards"] == {"total": 5, "resumed": 5}  # 1 held-out sample + 2 x (sample, teach); nothing recomputed
    assert rows(again) == first


def _run_cli(cfg: Path, out: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "build", str(cfg), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


@pytest.fixture(scope="module")
def reference(built_dataset, tmp_path_factory):
    """The session's uninterrupted build (tests/conftest.py: size 4 in shards of 2, so two teaching
    shards) is what a killed build must rerun to; test_cluster.py's CLI build of its config gives its rows
    too. The config here runs one dask worker: the two teaching tasks run one after the other, so the
    client's kill finds one done and one not yet (with two workers side by side they end together)."""
    cfg = tmp_path_factory.mktemp("ref") / "build.toml"
    text = (built_dataset.parent / "build.toml").read_text()
    assert text.count("\nn_workers = 2\n") == 1, text
    cfg.write_text(text.replace("\nn_workers = 2\n", "\nn_workers = 1\n"))
    return cfg, rows(built_dataset)


@pytest.mark.slow
def test_kill_9_client_then_rerun_gives_the_same_rows(reference, tmp_path):
    cfg, want = reference
    out = tmp_path / "out"
    proc = _run_cli(cfg, out)
    deadline = time.time() + 600
    while time.time() < deadline:  # kill once some, not all, teaching tasks have finished
        done = list((out / ".done").glob("teach-*.json")) if (out / ".done").exists() else []
        if 1 <= len(done) < 2:
            break
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()
    again = _run_cli(cfg, out)
    log = again.communicate(timeout=900)[0]
    assert again.returncode == 0, log
    assert rows(out) == want
    assert json.loads((out / "manifest.json").read_text())["shards"]["resumed"] >= 2


@pytest.mark.slow
def test_kill_9_worker_mid_task_then_rows_are_exact(reference, tmp_path):
    import dask
    from dask.distributed import Client, LocalCluster

    cfg_path, want = reference
    cfg = load_config(cfg_path)
    out = tmp_path / "out"
    dask.config.set({"distributed.worker.daemon": False})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        result = {}
        t = threading.Thread(target=lambda: result.update(m=build(cfg, out, scheduler=cluster.scheduler_address,
                                                                  progress=False)))
        t.start()
        killed = None
        deadline = time.time() + 600
        while killed is None and time.time() < deadline and t.is_alive():
            for addr, keys in client.processing().items():
                if any(str(k).startswith("teach-") for k in keys):
                    pid = client.run(os.getpid, workers=[addr])[addr]
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            time.sleep(0.1)
        t.join(timeout=900)
    assert killed is not None, "no teaching task was seen running"
    assert "m" in result
    assert rows(out) == want
