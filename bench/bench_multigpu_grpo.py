"""GRPO on several GPUs: `accelerate launch` of train-grpo at 1, 2, 4 processes, DDP and a sharded config.

For each launcher config (--launchers: `ddp` and `fsdp` from data/accelerate/; `zero2`/`zero3` only
where deepspeed is installed, else reported as skipped; `cpu2` on the CPU) and each process count P
(--procs), it runs

    accelerate launch --config_file data/accelerate/L.yaml --num_processes P --main_process_port PORT \\
        bench/bench_multigpu_grpo.py --rank-report DIR -- train-grpo OUT/config.toml --out OUT/L-pP --steps N

with NVLink multicast off in the launched environment (pipelines.multicast.NO_MULTICAST; train-grpo
also sets them itself). `--rank-report` runs `pipelines.cli.main` (what `-m pipelines.cli` runs)
with one addition, a callback that clocks each step's end on every rank, and then writes that rank's
record: LOCAL_RANK, its CUDA device, its peak `torch.cuda.max_memory_allocated` / reserved over the
whole run (model, optimizer, generation; the verifier's sandboxed workers are other processes, not
counted), and its step times. The trainer's stderr line "train-grpo: rank R (LOCAL_RANK=L, ...)
scores its N completions on cuda:[L]" shows where each rank verifies; the bench checks it is its own GPU.

Reported per run: steps/s over the steps after the first (the first carries the verifier pool's
start and first-call compiles), completions/s (steps/s x per-device batch x P: each rank generates
and scores its own batch, so the global batch grows with P), efficiency = completions/s against P x
the 1-process run of the same launcher, peak memory per rank, and TRL's mean `step_time`.

The run: a tiny Llama built here (`pipelines.grpo.tiny_model`), level-1 problems the `lowering`
teacher answers within --max-answer-tokens, as RL shards, warm-started on those answers for
--warm-start-sft-steps plain SFT steps (so completions hold code and the verifier runs), then GRPO with
the verifier reward on --device. The data and the warm start are bench/bench_grpo.py's (`_problems`,
`_write_shards`, `warm_start`), so the figures compare with its one-GPU table.

    python3 bench/bench_multigpu_grpo.py --device cuda --procs 1,2,4 --launchers ddp,fsdp --steps 6 \\
        --out /tmp/mg-grpo                                                        # GPU host
    python bench/bench_multigpu_grpo.py --device cpu --procs 1,2 --launchers cpu2 --steps 2 \\
        --out /tmp/mg-grpo-cpu                                                    # CPU smoke
Writes OUT/bench.json and OUT/table.md; exit 1 if a run failed or a rank scored off its own GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from pipelines.multicast import NO_MULTICAST  # noqa: E402 - after the path is set

SCORES = re.compile(r"^train-grpo: rank (\d+) \(LOCAL_RANK=(\S+), pid \d+\) scores its (\d+) completions on (.+)$")


# -- inside each launched rank ---------------------------------------------------------------------
def rank_main(report: Path, argv: list[str]) -> int:
    """pipelines.cli.main(argv), with a step clock on this rank; then this rank's record under `report`."""
    import torch
    from transformers import TrainerCallback

    import pipelines.grpo.trainer as trainer_mod
    from pipelines.cli import main

    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())

    build = trainer_mod.build

    def clocked(*a: Any, **k: Any) -> Any:
        tr = build(*a, **k)
        tr.add_callback(StepClock())
        return tr

    trainer_mod.build = clocked   # train() looks `build` up in its module at call time
    t0 = time.perf_counter()
    rc = main(argv)
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    rec = {"rank": int(os.environ.get("RANK", 0)), "local_rank": os.environ.get("LOCAL_RANK"), "rc": rc,
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "device": torch.cuda.current_device() if cuda else "cpu",
           "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
           "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
           "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,   # KiB on Linux
           "step_ends_s": [e - t0 for e in ends], "total_s": time.perf_counter() - t0,
           "multicast_env": {k: os.environ.get(k) for k in NO_MULTICAST}}
    report.mkdir(parents=True, exist_ok=True)
    (report / f"rank-{rec['rank']}.json").write_text(json.dumps(rec, indent=1))
    return rc


# -- the parent ------------------------------------------------------------------------------------
def prepare(out: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The tiny model (warm-started) and its RL shards; returns (policy, data dir)."""
    from transformers import AutoTokenizer

    from bench_grpo import _problems, _write_shards, warm_start
    from pipelines.grpo.tiny_model import build_tiny_llama

    tiny = build_tiny_llama(out / "tiny-llama", hidden_size=args.hidden, num_layers=args.layers,
                            num_heads=max(1, args.hidden // 64), intermediate_size=2 * args.hidden, seed=args.seed)
    tok = AutoTokenizer.from_pretrained(tiny)
    train, held, answers = _problems(args.problems, 1, args.max_answer_tokens, tok, args.seed)
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    prompts = _write_shards(data, train, held, "kernelbench-zeroshot")
    if args.warm_start_sft_steps <= 0:
        return tiny, data
    policy = out / "policy"
    if not (policy / "config.json").exists():
        pairs = [(prompts[p.problem_id], answers[p.problem_id]) for p in train]
        warm_start(tiny, policy, pairs, args.warm_start_sft_steps, args.device, 2e-3, 8, args.seed)
    return policy, data


def write_config(path: Path, policy: Path, data: Path, args: argparse.Namespace) -> None:
    cuda = args.device == "cuda"
    grpo = {"seed": args.seed, "max_steps": args.steps, "save_strategy": "no", "num_generations": args.group_size,
            "per_device_train_batch_size": args.group_size * args.prompts, "max_completion_length": args.max_new_tokens,
            "temperature": 1.0, "learning_rate": 5e-5, "lr_scheduler_type": "constant", "beta": 0.0,
            "use_cpu": not cuda, "bf16": cuda, "logging_steps": 1}
    sections = {"model": {"path": str(policy)}, "data": {"dir": str(data)},
                "reward": {"scheme": args.scheme, "device": args.device, "workers": args.workers, "timeout": 60.0},
                "curriculum": {"eval_every": 10_000, "eval_size": 1}, "grpo": grpo}
    lines = ['name = "bench-multigpu-grpo"', "plot = false"]
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")


def launch_env(device: str) -> dict[str, str]:
    env = {**os.environ, **NO_MULTICAST, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("TRITONFORGE_DATA", str(REPO / "data"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(launcher: str, procs: int, cfg: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{launcher}-p{procs}"
    run_dir, report = out / name, out / f"{name}-ranks"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(report, ignore_errors=True)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "data" / "accelerate" / f"{launcher}.yaml"), "--num_processes", str(procs),
           "--main_process_port", str(free_port()), str(Path(__file__).resolve()), "--rank-report", str(report), "--",
           "train-grpo", str(cfg), "--out", str(run_dir), "--steps", str(args.steps)]
    t0 = time.perf_counter()
    try:
        env = launch_env(args.device)
        if args.device == "cuda":   # P processes see GPUs 0..P-1 only: a 1-process rank's pool would use every GPU
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(procs))
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=args.run_timeout)
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), str(exc.stderr or "") + f"\ntimed out after {args.run_timeout} s"
    wall = time.perf_counter() - t0
    (out / f"{name}.log").write_text(" ".join(cmd) + "\n" + stdout + "\n--- stderr ---\n" + stderr)
    ranks = sorted((json.loads(f.read_text()) for f in report.glob("rank-*.json")), key=lambda r: r["rank"])
    scores = [m.groups() for m in map(SCORES.match, stderr.splitlines()) if m]
    # each rank verifies on its own device: cuda:[LOCAL_RANK] (or cuda:[0] under a per-rank CUDA_VISIBLE_DEVICES)
    # (one process without LOCAL_RANK: "cuda", its pool on the one GPU it sees)
    own = all(where in ("cpu", f"cuda:[{lr}]", "cuda:[0]") or (where == "cuda" and procs == 1)
              for _, lr, _, where in scores) and len(scores) == procs
    r0 = next((r for r in ranks if r["rank"] == 0), None)
    ends = r0["step_ends_s"] if r0 else []
    steady = (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 and ends[-1] > ends[0] else None
    logs = []
    if (run_dir / "metrics.jsonl").exists():
        logs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    step_times = [x["step_time"] for x in logs if isinstance(x.get("step_time"), (int, float))]
    batch = args.group_size * args.prompts
    return {"launcher": launcher, "procs": procs, "rc": rc, "wall_s": wall, "steps": len(ends),
            "steps_per_s": steady, "completions_per_s": steady * batch * procs if steady else None,
            "trl_step_time_mean_s": statistics.mean(step_times) if step_times else None,
            "peak_allocated_gib": [r["peak_allocated_gib"] for r in ranks],
            "peak_reserved_gib": [r["peak_reserved_gib"] for r in ranks],
            "peak_rss_gib": [r.get("peak_rss_gib") for r in ranks],
            "scores_on": [{"rank": int(a), "local_rank": b, "completions": int(c), "where": d} for a, b, c, d in scores],
            "own_gpu": own, "reward_mean": statistics.mean([x["reward"] for x in logs]) if logs else None,
            "pass_rate_mean": statistics.mean([x.get("verifier/pass_rate") or 0.0 for x in logs]) if logs else None,
            "tail": "" if rc == 0 else stderr[-2500:]}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| launcher | processes | steps/s | completions/s | efficiency vs 1 process | peak GiB per rank "
             "(CUDA allocated; CPU: RSS) | TRL step_time s | scored on own GPU | reward / pass rate |",
             "|---|---:|---:|---:|---:|---|---:|---|---|"]
    base = {r["launcher"]: r for r in results if r["procs"] == 1 and r.get("completions_per_s")}

    def f(v: Any, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['launcher']} | {r['procs']} | skipped: {r['skipped']} | | | | | | |")
            continue
        if r["rc"] != 0:
            lines.append(f"| {r['launcher']} | {r['procs']} | failed (exit {r['rc']}; see {r['launcher']}-p{r['procs']}.log) "
                         "| | | | | | |")
            continue
        b = base.get(r["launcher"])
        eff = r["completions_per_s"] / (b["completions_per_s"] * r["procs"]) if b and r["completions_per_s"] else None
        mem = (" / ".join(f"{m:.2f}" for m in r["peak_allocated_gib"] if m is not None)
               or "RSS " + " / ".join(f"{m:.2f}" for m in r["peak_rss_gib"] if m is not None))
        lines.append(f"| {r['launcher']} | {r['procs']} | {f(r['steps_per_s'], '.3f')} | {f(r['completions_per_s'], '.2f')} | "
                     f"{'—' if eff is None else format(100 * eff, '.0f') + '%'} | {mem} | {f(r['trl_step_time_mean_s'], '.2f')} | "
                     f"{'yes' if r['own_gpu'] else 'NO'} | {f(r['reward_mean'], '.3f')} / {f(r['pass_rate_mean'], '.2f')} |")
    return "\n".join(lines)


def main() -> int:
    if "--rank-report" in sys.argv:
        i = sys.argv.index("--rank-report")
        rest = sys.argv[i + 2:]
        return rank_main(Path(sys.argv[i + 1]), rest[1:] if rest[:1] == ["--"] else rest)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--procs", default=None, help="comma-separated process counts (default 1,2,4 up to the GPUs here)")
    ap.add_argument("--launchers", default=None, help="data/accelerate configs (default ddp,fsdp; cpu: cpu2)")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the first is not timed)")
    ap.add_argument("--problems", type=int, default=16, help="training problems (level 1)")
    ap.add_argument("--group-size", type=int, default=8, help="grpo.num_generations")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step on each rank")
    ap.add_argument("--max-new-tokens", type=int, default=1100, help="grpo.max_completion_length")
    ap.add_argument("--max-answer-tokens", type=int, default=1000)
    ap.add_argument("--warm-start-sft-steps", type=int, default=None, help="default 300 on cuda, 0 on cpu")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--scheme", default="drtriton", choices=["binary", "drtriton", "hrd"])
    ap.add_argument("--workers", type=int, default=4, help="verifier workers per rank")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-timeout", type=float, default=900, help="seconds one launch may take")
    args = ap.parse_args()
    if args.warm_start_sft_steps is None:
        args.warm_start_sft_steps = 300 if args.device == "cuda" else 0

    import torch

    have = torch.cuda.device_count() if args.device == "cuda" else 2
    if args.device == "cuda" and have == 0:
        print("bench_multigpu_grpo: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    procs = [int(x) for x in args.procs.split(",")] if args.procs else [p for p in (1, 2, 4) if p <= have]
    if args.device == "cuda" and max(procs) > have:
        print(f"bench_multigpu_grpo: --procs {args.procs}: only {have} GPU(s) here", file=sys.stderr)
        return 2
    launchers = args.launchers.split(",") if args.launchers else (["ddp", "fsdp"] if args.device == "cuda" else ["cpu2"])
    for name in launchers:
        if not (REPO / "data" / "accelerate" / f"{name}.yaml").exists():
            print(f"bench_multigpu_grpo: --launchers: no data/accelerate/{name}.yaml", file=sys.stderr)
            return 2
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    policy, data = prepare(out, args)
    cfg = out / "config.toml"
    write_config(cfg, policy, data, args)
    print(f"prepared in {time.perf_counter() - t0:.0f} s: {policy}, {data}", file=sys.stderr)

    import importlib.util

    meta = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
            "gpus": have if args.device == "cuda" else 0,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip() or None,
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "versions": {m: getattr(__import__(m), "__version__", "?") for m in ("torch", "transformers", "trl", "accelerate")}}

    def save() -> str:   # after every run: a bench cut short keeps what it measured
        text = table(results)
        (out / "bench.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
        (out / "table.md").write_text(text + "\n")
        return text

    results: list[dict[str, Any]] = []
    for launcher in launchers:
        if launcher.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
            results += [{"launcher": launcher, "procs": p, "skipped": "deepspeed is not installed"} for p in procs]
            continue
        for p in procs:
            r = run_one(launcher, p, cfg, out, args)
            results.append(r)
            print(f"{launcher} x{p}: exit {r['rc']}, {r['steps']} steps, {r['steps_per_s']} steps/s, peak GiB "
                  f"{r['peak_allocated_gib']}, scores on {[s['where'] for s in r['scores_on']]} "
                  f"({r['wall_s']:.0f} s)" + (f"\n{r['tail']}" if r["rc"] else ""), file=sys.stderr)
            save()
    print(save())
    bad = [r for r in results if not r.get("skipped") and (r["rc"] != 0 or not r["own_gpu"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
