"""User errors on the real command line: exit 2, a message naming the flag, key or file, no traceback,
and nothing started or written first. Cases run through `pipelines.cli.main`; those where the process
matters (a closed scheduler port, leaked temp folders) run `tritonforge` itself."""
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.limits import wall_bound

REPO = Path(__file__).resolve().parents[1]
TRITONFORGE = Path(sys.executable).parent / "tritonforge"
FIXTURES = REPO / "data" / "fixtures" / "verifier"
PROBLEM = str(FIXTURES / "problems" / "add.py")
HONEST = str(FIXTURES / "candidates" / "honest" / "add.py")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


no_cuda = pytest.mark.skipif(_cuda(), reason="the case is a machine without CUDA")


def _free_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def readonly(tmp_path) -> Path:
    """A folder this process cannot write in: mode 0o555 for a user; for root (whom modes do not stop)
    /sys, which refuses root too."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        return ro
    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pytest.skip("/sys takes files here; no read-only folder to try")
    except OSError:
        return Path("/sys")


def _run(args: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    return rc, capsys.readouterr().err


# -- build: every config key, before anything runs -------------------------------------------------
BUILD_CONFIGS = [
    ("[verify]\ntimeout = -5\n", "[verify] timeout: must be a finite number > 0, got -5"),
    ("[verify]\ntimeout = nan\n", "[verify] timeout: must be a finite number > 0, got nan"),
    ("[verify]\ntimeot = 5\n", "[verify] timeot: unknown key (known: device, device_memory_mb, resized, timeout, timing, workers)"),
    ("stage = []\n", "stage: at least one [[stage]] is needed"),
    ("[cluster]\ngpus_per_worker = -1\n", "[cluster] gpus_per_worker: must be an integer >= 0, got -1"),
    ("[cluster]\nthreads_per_worker = 0\n", "[cluster] threads_per_worker: must be an integer from 1 to 256, got 0"),
    ("[cluster]\nn_workers = 100000\n", "[cluster] n_workers: must be an integer from 1 to 256, got 100000"),
    ("[teacher]\nsamples = 0\n", "[teacher] samples: must be an integer from 1 to 1024, got 0"),
    ("[teacher]\nrounds = -1\n", "[teacher] rounds: must be an integer from 0 to 16, got -1"),
    ("[teacher]\ntemperature = -1\n", "[teacher] temperature: must be a finite number >= 0, got -1"),
    ("[teacher]\nmax_tokens = 0\n", "[teacher] max_tokens: must be an integer >= 1, got 0"),
    ("[teacher]\nprompt = \"nope\"\n", "[teacher] prompt: no prompt set 'nope'"),
    ("[teacher]\nspec = \"vllm:/nonexistent/model\"\n", "[teacher] spec: vllm:/nonexistent/model: no such folder"),
    ("[teacher]\nspec = \"replay:/nonexistent/answers.jsonl\"\n", "[teacher] spec: replay:/nonexistent/answers.jsonl: "
                                                                  "replay file not found"),
    ("[teacher]\nspec = \"openai:http://127.0.0.1:{port}\"\n", "[teacher] spec: openai:http://127.0.0.1:{port}: "),
    ("[[stage]]\nindex = 1\nlevels = [1]\nsize = 100000000000\n", "[[stage]] size, [heldout] size: 100000000200 "
                                                                   "problems in all; at most 1000000"),
    ("[heldout]\nsize = 100000000000\n", "[heldout] size: must be an integer from 0 to 1000000"),
    ("[[stage]]\nindex = 1\nlevels = [10000]\nsize = 1\n", "[[stage]] #1 levels: must be a non-empty list of integers "
                                                           "from 1 to 64, got [10000]"),
    ("seed = -3\n", "seed: must be an integer >= 0, got -3"),
]


@pytest.mark.parametrize("text, message", BUILD_CONFIGS, ids=[m.split(":")[0] for _, m in BUILD_CONFIGS])
def test_build_config_errors(tmp_path, capsys, text, message):
    port = _free_port()
    cfg = tmp_path / "demo.toml"
    cfg.write_text(text.format(port=port))
    t0 = time.process_time()
    rc, err = _run(["build", str(cfg), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and f"tritonforge build: error: {cfg}: {message.format(port=port)}" in err, err
    assert time.process_time() - t0 < 10  # refused, not sampled: no size or level ran (CPU s: load-free)
    assert "Traceback" not in err and not (tmp_path / "out").exists()  # no folder made or stamped


@no_cuda
def test_build_on_cuda_needs_gpus_and_cuda(tmp_path, capsys):
    cfg = tmp_path / "gpu.toml"
    cfg.write_text("[verify]\ndevice = \"cuda\"\n")
    rc, err = _run(["build", str(cfg), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and f"{cfg}: [cluster] gpus_per_worker: must be >= 1 when [verify] device = \"cuda\"" in err
    cfg.write_text("[verify]\ndevice = \"cuda\"\n[cluster]\ngpus_per_worker = 1\n")
    rc, err = _run(["build", str(cfg), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and f"{cfg}: [verify] device: \"cuda\", but no CUDA device is available here" in err
    assert not (tmp_path / "out").exists()


# -- flags of every command ------------------------------------------------------------------------
# {tmp}: the test's folder, {file}: a file in it, {ro}: a folder that cannot be written in.
FLAGS = [
    (["build", "demo", "--out", "{file}"], "tritonforge build: error: --out {file} is a file, not a folder"),
    (["build", "demo", "--out", "{ro}/out"], "tritonforge build: error: --out {ro}/out: cannot write in {ro}"),
    (["build", "demo", "--out", "{tmp}/out", "--scheduler", "notascheme"],
     "--scheduler notascheme: expected [tcp|tls|ws|wss://]HOST:PORT"),
    (["build", "demo", "--out", "{tmp}/out", "--scheduler", "notascheme://host:8786"],
     "--scheduler notascheme://host:8786: unknown scheme 'notascheme'"),
    (["build", "demo", "--out", "{tmp}/out", "--scheduler", "tcp://127.0.0.1:99999"],
     "--scheduler tcp://127.0.0.1:99999: expected a host and a port from 1 to 65535"),
    (["sample", "--n", "3", "--level", "1", "--seed", "-1", "--out", "{tmp}/p.parquet"], "--seed must be >= 0, got -1"),
    (["sample", "--n", "3", "--level", "10000", "--out", "{tmp}/p.parquet"], "--level must be from 1 to 64, got 10000"),
    (["sample", "--n", "3", "--levels", "1,100", "--out", "{tmp}/p.parquet"], "--levels must be from 1 to 64, got 100"),
    (["sample", "--n", "1000000", "--level", "1", "--out", "{tmp}/p.parquet"], "--n must be from 1 to 100000"),
    (["sample", "--n", "3", "--level", "1", "--workers", "0", "--out", "{tmp}/p.parquet"], "--workers must be from 1 to"),
    (["sample", "--n", "3", "--level", "1", "--max-elements", "0", "--out", "{tmp}/p.parquet"],
     "--max-elements must be >= 1, got 0"),
    (["sample", "--n", "3", "--level", "1", "--ops", ",", "--out", "{tmp}/p.parquet"], "--ops must name at least one"),
    (["sample", "--n", "3", "--level", "1", "--out", "{file}/p.parquet"], "--out {file}/p.parquet: {file} is a file"),
    (["sample", "--n", "3", "--level", "1", "--out", "{ro}/p.parquet"], "--out {ro}/p.parquet: cannot write in {ro}"),
    (["sample", "--n", "20", "--level", "1", "--ops", "triplet_margin_loss", "--max-elements", "64", "--out",
      "{tmp}/p.parquet"], "found only 14 distinct problems for level 1 over ops triplet_margin_loss (max_elements 64), "
                          "20 asked for"),
    (["sample", "--n", "3", "--level", "1", "--ops", "relu", "--max-elements", "1", "--out", "{tmp}/p.parquet"],
     "no valid program for ops ['relu']"),
    (["verify", "--problem", PROBLEM, "--candidate", HONEST, "--timeout", "nan"],
     "--timeout must be a finite number of seconds > 0, got nan"),
    (["verify", "--problem", PROBLEM, "--candidate", HONEST, "--timeout", "inf"], "--timeout must be a finite number"),
    (["verify", "--problem", PROBLEM, "--candidate", HONEST, "--timeout", "0"], "--timeout must be a finite number"),
    (["verify", "--problem", PROBLEM, "--candidate", HONEST, "--max-memory", "1"],
     "--max-memory must be at least 768 MB on cpu"),
    (["verify", "--problem", PROBLEM, "--candidate", "{tmp}/missing.py"], "--candidate {tmp}/missing.py: file not found"),
    (["verify", "--problem", "{tmp}", "--candidate", HONEST], "--problem {tmp}: not a file"),
    (["verify", "--problem", PROBLEM, "--candidate", "{latin1}"], "--candidate {latin1}: cannot read it"),
    (["export", "{tmp}", "--format", "sft", "--out", "{file}"], "tritonforge export: error: --out {file} is a file"),
    (["export", "{tmp}", "--format", "sft", "--out", "{tmp}/e"], "{tmp} is not a built dataset folder"),
    (["train-grpo", "grpo-tiny", "--out", "{file}"], "tritonforge train-grpo: error: --out {file} is a file"),
    (["train-grpo", "grpo-tiny", "--out", "{ro}/run"], "--out {ro}/run: cannot write in {ro}"),
    (["train-grpo", "grpo-tiny", "--steps", "0"], "--steps: must be >= 1"),
    (["train-grpo", "{grpo}"], "{grpo}: [[data.synth.stage]] #1 levels: must be a non-empty list of integers from 1 to 64"),
]


@pytest.mark.parametrize("args, message", FLAGS, ids=[" ".join(a[:1] + [m[:40]]) for a, m in FLAGS])
def test_flag_errors(tmp_path, capsys, readonly, args, message):
    names = {"tmp": tmp_path, "file": tmp_path / "a-file", "ro": readonly, "latin1": tmp_path / "latin1.py",
             "grpo": tmp_path / "grpo.toml"}
    names["file"].write_text("x")
    names["latin1"].write_bytes("# caf\xe9\n".encode("latin-1"))
    names["grpo"].write_text("[model]\npath = \"x\"\n[data.synth]\n[[data.synth.stage]]\nlevels = [100]\n")
    before = set(tmp_path.iterdir())
    rc, err = _run([a.format(**names) for a in args], capsys)
    assert rc == 2 and message.format(**names) in err, err
    assert "Traceback" not in err and set(tmp_path.iterdir()) == before  # nothing written


# -- where the process matters ----------------------------------------------------------------------
def _tritonforge(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(TRITONFORGE), *args], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_scheduler_on_a_closed_port_is_refused_in_seconds(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    proc = _tritonforge("build", "demo", "--out", str(tmp_path / "out"), "--scheduler", address)
    assert time.perf_counter() - t0 < wall_bound(10)
    assert proc.returncode == 2 and f"--scheduler {address}: cannot reach it" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_scheduler_that_does_not_speak_dask_is_refused(tmp_path):
    """A port that accepts connections and says nothing would hold the dask client; the handshake is timed."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.perf_counter()
        proc = _tritonforge("build", "demo", "--out", str(tmp_path / "out"), "--scheduler", address)
        assert time.perf_counter() - t0 < wall_bound(20)
    assert proc.returncode == 2 and "does not answer as a dask scheduler" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_a_running_scheduler_is_accepted():
    from dask.distributed import LocalCluster

    from pipelines.build.cli import check_scheduler

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", dashboard_address=None) as cluster:
        check_scheduler(cluster.scheduler_address)


@pytest.mark.parametrize("flags, message", [
    pytest.param(["--device", "cuda"], "--device cuda: no CUDA device is available here", marks=no_cuda),
    (["--max-memory", "1"], "--max-memory must be at least"),
    (["--timeout", "nan"], "--timeout must be a finite number"),
])
def test_verify_usage_errors_leave_no_temp_folder(tmp_path, flags, message):
    proc = _tritonforge("verify", "--problem", PROBLEM, "--candidate", HONEST, *flags, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not list(tmp_path.glob("tritonforge-verify-*"))


def test_verify_reads_past_a_byte_order_mark(tmp_path, capsys):
    """Editors on some systems start UTF-8 files with a BOM; it is not part of the module."""
    bom = b"\xef\xbb\xbf"
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_bytes(bom + Path(PROBLEM).read_bytes())
    candidate.write_bytes(bom + Path(HONEST).read_bytes())
    rc = main(["verify", "--problem", str(problem), "--candidate", str(candidate), "--timeout", "60"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("pass"), out
