"""The closed loop: does a model trained on TritonForge's data alone write verified Triton for programs it never saw?

One subcommand per stage, each reading what the one before wrote under --out; on a GPU box
closed_loop_parts/one_machine.sh runs them back to back in one detached session, sized to its budgets
(docs/closed_loop.md has the device calls):

    data     `tritonforge build` (the lowering teacher, verified) + `tritonforge export` (sft, rl); the
             held-out problems split into test sets disjoint from training by dag_hash (`dag`) and
             by op multiset (`ops`), and a validation set for GRPO's curriculum
    student  a Llama of at most 100M parameters built from scratch, its tokenizer trained on the SFT
             text; SFT with TRL's SFTTrainer on the sft rows (loss on the answer only)
    eval     held-out greedy pass@1 through the VerifierPool (--stage base | sft | grpo), the share of
             passes faster than eager (GPU only) and the verdict breakdown
    grpo     `tritonforge train-grpo` from the SFT model on the RL shards, curriculum on
    report   report.md (the table, the targets, the verdicts), pass_at_1.png, results.json
    all      every stage in order (what the CPU smoke runs)

    python bench/closed_loop.py --profile smoke all --out /tmp/cl        # CPU, interpreter, a few minutes
    python3 bench/closed_loop.py --profile gpu data --out out/closed-loop  # GPU box, then student, eval, ...
    bash bench/closed_loop_parts/one_machine.sh run /tmp/cl-run             # GPU box: every stage, sized

What it keeps: every stage goes through the project's own pieces (the build and its resume, export,
the verifier pool, train-grpo with its curriculum, resume and metrics); the held-out checks are
stated and enforced (no test problem shares a dag_hash with training; none in `ops` shares an op
multiset). What it simplifies: one teacher (lowering) and one sample per problem, no repair rounds;
greedy decoding with a static KV cache and one CUDA graph a step (pipelines/grpo/decode.py, which
also samples train-grpo's rollouts; no vLLM on the GPU box); problems at the `cpu` size
profile (profiles.py says why); one seed; a time budget per stage that stops training early, with
what was done recorded, rather than a fixed step count; the `smoke` profile proves the machinery,
not learning (its student is too small to write a kernel, so its pass@1 is 0 everywhere).
Exit codes: 0 done, 2 a stage's input is missing or a command failed, 3 a stage ran past its budget
and stopped (rerun the same command to resume it: the build and train-grpo pick up where they were).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

STAGES = ("data", "student", "eval", "grpo", "report", "all")


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated levels, got {text!r}") from None
    if not levels or any(lv < 1 for lv in levels) or len(set(levels)) < len(levels):
        raise argparse.ArgumentTypeError(f"expected distinct levels >= 1, got {text!r}")
    return levels


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size or comma-separated sizes, got {text!r}") from None
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected a size or comma-separated sizes, got {text!r}")
    return sizes


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=["smoke", "gpu"], default=None,
                    help="sizes (closed_loop_parts/profiles.py); default: gpu when torch sees a GPU, else smoke")
    ap.add_argument("--smoke", action="store_true", help="same as --profile smoke")
    ap.add_argument("--out", default=None, help="run folder (default out/closed-loop-PROFILE)")
    ap.add_argument("--levels", type=_levels, default=None, help="levels to train and test, e.g. 1,2,5 (default 1,2)")
    ap.add_argument("--stage-size", type=_sizes, default=None,
                    help="training problems per level: one number for every level, or one per level, e.g. 1024,3072 "
                         "(default: the profile's); a larger size grows an existing build, keeping what it made")
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--budget-s", type=float, default=None, help="the stage's time budget (default: the profile's)")
    ap.add_argument("--eval-stage", choices=["base", "sft", "grpo"], default="sft", help="eval: which model")
    ap.add_argument("--checkpoint", default=None, help="eval --eval-stage grpo: a checkpoint step (default: the last)")
    ap.add_argument("--limit", type=int, default=None, help="eval: at most this many problems per set and level")
    ap.add_argument("--steps", type=int, default=None, help="grpo: train to this many steps (default: the profile's)")
    ap.add_argument("--build-device", choices=["cpu", "cuda"], default=None,
                    help="data: verify the build on this device (cpu: the Triton interpreter, so a CPU box builds "
                         "the data a GPU box trains on; default: the profile's)")
    ap.add_argument("--epochs", type=float, default=None, help="student: SFT epochs (default: the profile's)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.budget_s is not None and not args.budget_s > 0:
        print("closed_loop: --budget-s must be > 0", file=sys.stderr)
        return 2
    name = "smoke" if args.smoke else args.profile
    if name is None:
        import torch

        name = "gpu" if torch.cuda.is_available() else "smoke"
    from closed_loop_parts.profiles import PROFILES

    p = PROFILES[name]
    if args.levels:
        p = p.with_levels(args.levels)
    if args.stage_size is not None:
        sizes = args.stage_size * len(p.levels) if len(args.stage_size) == 1 else args.stage_size
        if len(sizes) != len(p.levels) or min(sizes) < 1:
            print(f"closed_loop: --stage-size needs one size >= 1, or one per level ({len(p.levels)}), "
                  f"got {','.join(map(str, args.stage_size))}", file=sys.stderr)
            return 2
        p = dataclasses.replace(p, stage_size=dict(zip(p.levels, sizes)))
    if args.epochs is not None:
        if not args.epochs > 0:
            print("closed_loop: --epochs must be > 0", file=sys.stderr)
            return 2
        p = dataclasses.replace(p, sft_epochs=args.epochs)
    if args.build_device:
        if args.stage != "data":
            print("closed_loop: --build-device is for the data stage", file=sys.stderr)
            return 2
        p = p.on_build_device(args.build_device)
    if (p.build_device or p.device) == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported, here and in the pool's workers
    else:
        import torch

        if not torch.cuda.is_available():
            print(f"closed_loop: profile {p.name} needs a GPU; torch sees none (use --profile smoke)", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from pipelines.multicast import keep_off

    keep_off()
    from closed_loop_parts import data, evaluate, grpo, report, student
    from closed_loop_parts.common import Layout, StageError, StageTimeout

    lay = Layout(args.out or REPO / "out" / f"closed-loop-{p.name}")
    print(f"closed_loop: profile {p.name}, levels {list(p.levels)}, out {lay.out}", file=sys.stderr)
    stages = {
        "data": lambda: data.run(lay, p, args.budget_s),
        "student": lambda: student.run(lay, p, args.budget_s),
        "eval": lambda: evaluate.run(lay, p, args.eval_stage, args.checkpoint, args.limit, args.budget_s),
        "grpo": lambda: grpo.run(lay, p, args.budget_s, args.steps),
    }
    try:
        if args.stage == "all":
            data.run(lay, p, None)
            student.run(lay, p, None)
            for which in ("base", "sft"):
                evaluate.run(lay, p, which, None, args.limit, None)
            grpo.run(lay, p, None, args.steps)
            evaluate.run(lay, p, "grpo", None, args.limit, None)
        elif args.stage != "report":
            stages[args.stage]()
        if args.stage in ("report", "all", "eval"):   # an evaluation refreshes the report
            print(f"closed_loop: report at {report.run(lay, p)}", file=sys.stderr)
    except StageTimeout as exc:
        print(f"closed_loop: {exc}", file=sys.stderr)
        return 3
    except StageError as exc:
        print(f"closed_loop: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
