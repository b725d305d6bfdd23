"""What every stage shares: the run folder's layout, the project's commands as subprocesses, stage records."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class StageError(RuntimeError):
    """A stage cannot run: what it needs is missing, or a command it ran failed (the message says which)."""


class Layout:
    """Where each stage reads and writes, under the run folder."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out).absolute()
        self.build_config = self.out / "build.toml"
        self.build = self.out / "build"                  # `tritonforge build` output
        self.sft = self.out / "sft"                      # `tritonforge export --format sft`
        self.grpo_data = self.out / "grpo-data"          # rl/ = unseen prompts, heldout/ = validation, seen/ = export
        self.eval_sets = self.out / "eval-sets"          # dag/level=L, ops/level=L
        self.data_json = self.out / "data.json"
        self.base = self.out / "student" / "base"        # the random-weight student
        self.sft_model = self.out / "student" / "sft"
        self.sft_run = self.out / "student" / "sft-run"
        self.grpo_config = self.out / "grpo.toml"
        self.grpo = self.out / "grpo"                    # `tritonforge train-grpo --out`
        self.evals = self.out / "eval"
        self.stages = self.out / "stages"
        self.report = self.out / "report.md"
        self.plot = self.out / "pass_at_1.png"
        self.results = self.out / "results.json"


def child_env(device: str) -> dict[str, str]:
    """The environment of the project's commands: the checkout importable (the GPU box runs it from
    the checkout, not installed), its data folder, the interpreter on the CPU, NVLink multicast off."""
    from pipelines.multicast import NO_MULTICAST

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TRITONFORGE_DATA", str(REPO / "data"))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    if device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
    for k, v in NO_MULTICAST.items():
        env.setdefault(k, v)
    return env


class StageTimeout(StageError):
    """A command ran past the stage's budget and was stopped (its work so far is kept: rerun to resume)."""


def tritonforge(args: list[str], device: str, log: list[str], timeout: float | None = None) -> str:
    """Run `tritonforge ARGS` (as `python -m pipelines.cli`, the console script's code); returns its
    stdout. The command is appended to `log`; a failure is a StageError. Past `timeout` seconds the
    command's process group gets SIGTERM (the build and train-grpo stop cleanly and resume on a
    rerun), then SIGKILL 60 s later, and StageTimeout is raised."""
    cmd = [sys.executable, "-m", "pipelines.cli", *args]
    log.append("tritonforge " + shlex.join(args))
    print(f"closed_loop: $ {log[-1]}", file=sys.stderr, flush=True)
    # its own session: on a timeout the whole group (dask's workers, verifier pools) is stopped, and only it
    proc = subprocess.Popen(cmd, env=child_env(device), cwd=REPO, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        raise StageTimeout(f"`{log[-1]}` ran past its {timeout:.0f} s budget and was stopped; "
                           f"rerun the stage to resume it") from None
    sys.stderr.write(out)
    if proc.returncode != 0:
        raise StageError(f"`{log[-1]}` exited {proc.returncode}")
    return out


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def commit() -> str:
    """The checkout's commit (+dirty); CLOSED_LOOP_COMMIT names it where the copy has no .git (a device box)."""
    if os.environ.get("CLOSED_LOOP_COMMIT"):
        return os.environ["CLOSED_LOOP_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def device_name(device: str) -> str:
    if device != "cuda":
        return "cpu"
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda (none visible)"


def write_json(path: Path, obj: Any) -> None:
    from synth.atomic_write import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise StageError(f"{path} is missing: run the `{what}` stage first")
    return json.loads(path.read_text())


class StageClock:
    """Times a stage and writes `stages/NAME.json`: command line, commands run, seconds, commit, device."""

    def __init__(self, lay: Layout, name: str, device: str) -> None:
        self.lay, self.name, self.device = lay, name, device
        self.commands: list[str] = []
        self.extra: dict[str, Any] = {}

    def __enter__(self) -> "StageClock":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None:
            return
        rec = {"stage": self.name, "seconds": round(time.perf_counter() - self.t0, 1),
               "command": "python3 bench/closed_loop.py " + shlex.join(sys.argv[1:]), "commands": self.commands,
               "commit": commit(), "device": device_name(self.device), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
               **self.extra}
        write_json(self.lay.stages / f"{self.name}.json", rec)
