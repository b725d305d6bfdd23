"""GRPO on one GPU through train-grpo (TRL's GRPOTrainer): steps/s, peak memory, and where a step's time goes.

A self-contained run for the device machine (nothing is downloaded):
1. build a tiny Llama here (`pipelines.grpo.tiny_model`: the locally trained 2k-token BPE);
2. draw level-1 problems whose `lowering` teacher answer fits `--max-answer-tokens`, and write them as
   RL shards (`rl/stage=1`, plus disjoint `heldout/level=1`) with the build's own row builder;
3. warm start (`--warm-start-sft-steps`, default 600): plain AdamW steps of answer-token cross-entropy
   on the lowering teacher's answers to the training problems, saved as the policy. A random tiny
   model writes no kernel, so without it every verifier reward is 0 and GRPO compares nothing. Plain
   steps rather than TRL's SFTTrainer: the same warm start as the bench of issue 7 (so the figures
   compare), and ~30 lines instead of a second trainer's configuration;
4. GRPO through `pipelines.grpo.trainer.build` (what `tritonforge train-grpo` runs) with the verifier
   reward (`drtriton` by default: gated 1 + clipped log speedup, timed on the GPU), the verifier pool
   started before the first step (its start is reported apart), no checkpoints (`save_strategy =
   "no"`: a bench times training, not saving).

What it measures. TRL logs one time per step (`step_time`, its `training_step`: generation, reward
and forward/backward, not the optimizer step); its profiling timers go to wandb/mlflow only. So the
bench wraps the trainer's own methods: `_generate` (generation), the reward function (reward), the
held-out evaluation of the promotion callback (eval); a step's wall time is from one `on_step_end`
to the next, and "update" is the rest (old-policy log-probs if any, forward/backward, optimizer,
logging). Peak memory is `torch.cuda.max_memory_allocated` of the trainer process, reset after the
warm start (the verifier's worker processes hold their own GPU memory, not counted). Prints a
Markdown table last; writes `bench_grpo.json`, and train-grpo's `run/metrics.jsonl`, under --out.

    python3 bench/bench_grpo.py --device cuda --out /tmp/bench-grpo --steps 10 --budget-s 240   # GPU box (setup below)
    python bench/bench_grpo.py --device cpu --out /tmp/bg-cpu --problems 2 --heldout 1 --steps 2 --group-size 2 \\
        --warm-start-sft-steps 5 --max-new-tokens 16 --eval-every 2 --workers 1 --hidden 128 --layers 2   # CPU smoke

The CPU smoke takes 75-100 s on a loaded 2-core box (verifier pool start ~13 s, warm start ~17 s, two steps
~18 s with one held-out evaluation); its completions are too short to hold code, so rewards are 0.
On the GPU box (python 3.12, torch 2.11, no network) the rest travels as wheels of requirements.lock's
versions: `.whl` (the verifier's: dill, jinja2, markupsafe, networkx, python-constraint2, tqdm) and
`.whl-grpo` (trl, transformers, accelerate, datasets, peft, tokenizers, safetensors, huggingface_hub
and what they need; 42 MiB together); pyarrow, pandas and numpy come from the image
(`IMAGE_FLOORS`, checked first). Carry `.whl` and `.whl-grpo`, then:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .whl-grpo/*.whl \\
      && export PYTHONPATH=/tmp/site:$PWD TRITONFORGE_DATA=$PWD/data PYTHONUNBUFFERED=1 \\
      && timeout 570 python3 bench/bench_grpo.py --device cuda --out /tmp/bg --steps 10 --budget-s 240
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _problems(n: int, heldout: int, max_answer_tokens: int, tokenizer: Any, seed: int) -> tuple[list, list, dict]:
    """Level-1 problems the lowering teacher answers within the token budget; the last `heldout` are held out."""
    import synth
    from distill.lowering import lower

    kept, answers = [], {}
    for p in synth.sample(n=(n + heldout) * 4, level=1, seed=seed, unique=True):
        try:
            text = lower(p).completion()
        except Exception:  # noqa: BLE001 - a problem the lowering cannot take is skipped
            continue
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_answer_tokens:
            continue
        kept.append(p)
        answers[p.problem_id] = text
        if len(kept) == n + heldout:
            break
    if len(kept) < n + heldout:
        raise SystemExit(f"bench_grpo: only {len(kept)} level-1 problems have a lowering answer of at most "
                         f"{max_answer_tokens} tokens; lower --problems/--heldout or raise --max-answer-tokens")
    return kept[:n], kept[n:], answers


def _write_shards(root: Path, train: list, held: list, prompt: str) -> dict[str, list[dict[str, str]]]:
    """RL shards as `tritonforge build` writes them; returns each training problem's prompt messages."""
    from curriculum.rows import rl_row
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows
    from distill.teacher.prompts import load_prompts

    ps = load_prompts(prompt)
    rows = [rl_row(p, ps.initial(p), 1, "train", i) for i, p in enumerate(train)]
    write_rows(rows, RL_SCHEMA, root / "rl" / "stage=1" / "part-00000.parquet")
    if held:
        write_rows([rl_row(p, ps.initial(p), 0, "test", i) for i, p in enumerate(held)], RL_SCHEMA,
                   root / "heldout" / "level=1" / "part-00000.parquet")
    return {r["problem_id"]: r["prompt"] for r in rows}


def warm_start(model_dir: Path, out_dir: Path, pairs: list[tuple[list[dict[str, str]], str]], steps: int,
               device: str, lr: float, batch: int, seed: int) -> list[float]:
    """`steps` AdamW steps of answer-token cross-entropy on (prompt messages, answer) pairs; saves the
    policy (and tokenizer) to `out_dir` and returns each step's loss."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    model.train()
    # prompt as the trainer renders it (chat template + generation prompt), answer ended by the end-of-turn token
    seqs = []
    for messages, answer in pairs:
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        p = tok(text, add_special_tokens=False)["input_ids"]
        a = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append((p, a))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(seed)
    bf16 = device == "cuda"
    losses = []
    for _ in range(steps):
        chosen = [seqs[rng.randrange(len(seqs))] for _ in range(min(batch, len(seqs)))]
        width = max(len(p) + len(a) for p, a in chosen)
        ids = torch.full((len(chosen), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)      # loss on answer tokens only
        mask = torch.zeros_like(ids)
        for i, (p, a) in enumerate(chosen):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
            mask[i, :len(p) + len(a)] = 1
        ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return losses


class _Timers:
    """Seconds spent per phase in the current step, plus each finished step's record."""

    def __init__(self) -> None:
        self.cur: dict[str, float] = {"generate_s": 0.0, "reward_s": 0.0, "eval_s": 0.0}
        self.steps: list[dict[str, float]] = []
        self.verdicts: list[str] = []
        self.rewards: list[float] = []

    def wrap(self, fn: Any, key: str) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.cur[key] += time.perf_counter() - t
        return timed


class _RecordingReward:
    """The trainer's reward function, timed, with its verdicts and rewards kept (TRL sees the same name)."""

    def __init__(self, fn: Any, timers: _Timers) -> None:
        self.fn, self.timers, self.__name__ = fn, timers, fn.__name__

    def __call__(self, *a: Any, **kw: Any) -> list[float]:
        orig = kw.get("log_extra")

        def log_extra(column: str, values: list) -> None:
            if column == "verdict":
                self.timers.verdicts.extend(values)
            if callable(orig):
                orig(column, values)

        kw["log_extra"] = log_extra
        t = time.perf_counter()
        got = self.fn(*a, **kw)
        self.timers.cur["reward_s"] += time.perf_counter() - t
        self.timers.rewards.extend(got)
        return got


def _step_callback(timers: _Timers, budget_s: float | None) -> Any:
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Per-step wall time (on_step_end to on_step_end; held-out eval included) and the time budget."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = self.last = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            now = time.perf_counter()
            rec = {"step": state.global_step, "wall_s": now - self.last, **timers.cur}
            rec["update_s"] = rec["wall_s"] - rec["generate_s"] - rec["reward_s"] - rec["eval_s"]
            timers.steps.append(rec)
            timers.cur = dict.fromkeys(timers.cur, 0.0)
            self.last = now
            if budget_s is not None and now - self.t0 > budget_s:
                control.should_training_stop = True
            return control

    return StepClock()


# Too large to carry to the GPU box (pyarrow's wheel alone is 55 MB); its image has them. The floors
# are what trl 1.16 and datasets 5.2 require: older ones fail at import, later, with less clear errors.
IMAGE_FLOORS = {"pyarrow": "24.0.0", "pandas": "2.1.1", "numpy": "1.26.0"}


def _preflight() -> str | None:
    """None when the packages this run imports are present at usable versions, else what is wrong."""
    import importlib.metadata as md

    from packaging.version import Version

    problems = []
    for name, floor in IMAGE_FLOORS.items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            problems.append(f"{name} is not installed (need >= {floor})")
            continue
        if Version(have) < Version(floor):
            problems.append(f"{name} {have} is older than {floor}")
    for name in ("trl", "transformers", "accelerate", "datasets", "peft", "tokenizers", "safetensors"):
        try:
            md.version(name)
        except md.PackageNotFoundError:
            problems.append(f"{name} is not installed (carry the wheels of requirements.lock)")
    return "; ".join(problems) or None


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "triton", "transformers", "trl", "accelerate", "datasets", "peft", "pyarrow", "pandas", "numpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "missing"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/bench-grpo")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=10, help="GRPO steps (grpo.max_steps)")
    ap.add_argument("--budget-s", type=float, default=None, help="start no step after this many seconds of training")
    ap.add_argument("--problems", type=int, default=16, help="training problems (level 1)")
    ap.add_argument("--heldout", type=int, default=4, help="held-out problems (level 1)")
    ap.add_argument("--group-size", type=int, default=8, help="grpo.num_generations")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--max-new-tokens", type=int, default=1100, help="grpo.max_completion_length")
    ap.add_argument("--max-answer-tokens", type=int, default=1000, help="keep problems whose lowering answer fits this")
    ap.add_argument("--warm-start-sft-steps", type=int, default=600, help="0: GRPO from the random tiny model")
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-5, help="grpo.learning_rate")
    ap.add_argument("--scheme", default="drtriton", choices=["binary", "drtriton", "hrd"])
    ap.add_argument("--zero-std", default="drop", choices=["keep", "drop"])
    ap.add_argument("--workers", type=int, default=8, help="verifier workers")
    ap.add_argument("--eval-every", type=int, default=4, help="held-out pass@1 every N steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    bad = _preflight()
    if bad:
        print(f"bench_grpo: {bad}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")     # local folders only: a hub look-up would wait on a network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from pipelines.multicast import keep_off

    keep_off()   # as train-grpo's CLI does (one process here: no torch.distributed, but the same environment)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_grpo: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from pipelines.grpo.config import parse_config
    from pipelines.grpo.tiny_model import build_tiny_llama
    from pipelines.grpo.trainer import build
    from transformers import AutoTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tiny = build_tiny_llama(out / "tiny-llama", hidden_size=args.hidden, num_layers=args.layers,
                            num_heads=max(1, args.hidden // 64), intermediate_size=2 * args.hidden, seed=args.seed)
    tok = AutoTokenizer.from_pretrained(tiny)
    train, held, answers = _problems(args.problems, args.heldout, args.max_answer_tokens, tok, args.seed)
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    prompts = _write_shards(data, train, held, "kernelbench-zeroshot")
    t_data = time.perf_counter() - t0

    t1 = time.perf_counter()
    policy, losses = tiny, []
    if args.warm_start_sft_steps > 0:
        policy = out / "policy"
        shutil.rmtree(policy, ignore_errors=True)
        pairs = [(prompts[p.problem_id], answers[p.problem_id]) for p in train]
        losses = warm_start(tiny, policy, pairs, args.warm_start_sft_steps, device, args.sft_lr, args.sft_batch,
                            args.seed)
    t_sft = time.perf_counter() - t1

    run = out / "run"
    shutil.rmtree(run, ignore_errors=True)     # a fresh run: train-grpo resumes from a folder with a checkpoint
    grpo = {"seed": args.seed, "max_steps": args.steps, "save_strategy": "no", "num_generations": args.group_size,
            "per_device_train_batch_size": args.group_size * args.prompts, "max_completion_length": args.max_new_tokens,
            "temperature": 1.0, "learning_rate": args.lr, "lr_scheduler_type": "constant", "beta": 0.0,
            "epsilon": 0.2, "epsilon_high": 0.28, "use_cpu": device == "cpu", "bf16": device == "cuda"}
    cfg = parse_config({
        "name": "bench-grpo", "plot": False,
        "model": {"path": str(policy)},
        "data": {"dir": str(data)},
        "reward": {"scheme": args.scheme, "device": device, "workers": args.workers, "timeout": 60.0},
        "curriculum": {"eval_every": args.eval_every, "eval_size": max(1, args.heldout), "zero_std": args.zero_std},
        "grpo": grpo,
    }, str(run))
    t2 = time.perf_counter()
    trainer = build(cfg)
    t_build = time.perf_counter() - t2

    timers = _Timers()
    trainer._generate = timers.wrap(trainer._generate, "generate_s")
    trainer.promotion.evaluate = timers.wrap(trainer.promotion.evaluate, "eval_s")
    trainer.reward_funcs[0] = _RecordingReward(trainer.reward_funcs[0], timers)
    trainer.add_callback(_step_callback(timers, args.budget_s))
    from curriculum.rewards.scorer import shared_pool

    t3 = time.perf_counter()
    shared_pool(trainer.reward_funcs[0].fn.settings)   # start the verifier pool outside the timed steps
    t_pool = time.perf_counter() - t3
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t4 = time.perf_counter()
    trainer.train()
    t_train = time.perf_counter() - t4
    peak = {"max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
            "max_memory_reserved_gib": torch.cuda.max_memory_reserved() / 2**30} if device == "cuda" else {}

    from pipelines.grpo import metrics

    logs = metrics.read(run / "metrics.jsonl") if (run / "metrics.jsonl").exists() else []
    steps = timers.steps
    n = len(steps)
    keys = ("generate_s", "reward_s", "update_s", "eval_s")
    totals = {k: sum(s[k] for s in steps) for k in keys}
    wall = sum(s["wall_s"] for s in steps)
    steady = steps[1:] if n > 1 else steps      # the first step carries first-call costs (kernels, shapes)
    statuses: dict[str, int] = {}
    for v in timers.verdicts:
        statuses[v] = statuses.get(v, 0) + 1
    passes = [r for r in timers.rewards if r > 0]
    speedups = [math.exp(r - 1) for r in passes] if args.scheme != "binary" and device == "cuda" else []
    summary = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "versions": _versions(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "model": {"hidden": args.hidden, "layers": args.layers,
                  "params": sum(p.numel() for p in trainer.model.parameters())},
        "steps": n, "group_size": args.group_size, "prompts_per_step": args.prompts,
        "samples_per_step": args.group_size * args.prompts, "max_new_tokens": args.max_new_tokens,
        "scheme": args.scheme, "verifier_workers": args.workers,
        "steps_per_s": n / wall if wall else None,
        "steps_per_s_after_first": len(steady) / sum(s["wall_s"] for s in steady) if steady else None,
        "train_wall_s": t_train,
        "setup_s": {"data": t_data, "warm_start": t_sft, "trainer_build": t_build, "verifier_pool_start": t_pool},
        "split_s": totals, "split_share": {k: totals[k] / wall if wall else None for k in keys},
        "per_step": steps, "peak_memory": peak,
        "warm_start_loss_first_last": [losses[0], losses[-1]] if losses else None,
        "reward_by_step": [r.get("reward") for r in logs],
        "pass_rate_by_step": [metrics.pass_rate(r) for r in logs],
        "trl_step_time_by_step": [r.get("step_time") for r in logs],
        "completion_mean_length_by_step": [r.get("completions/mean_length") for r in logs],
        "frac_reward_zero_std_by_step": [r.get("frac_reward_zero_std") for r in logs],
        "eval_pass_at_1": [(r["step"], r["curriculum/eval_pass_at_1"]) for r in logs
                           if r.get("curriculum/eval_pass_at_1") is not None],
        "statuses": statuses,
        "speedup_median_of_passes": statistics.median(speedups) if speedups else None,
    }
    (out / "bench_grpo.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "per_step"}, indent=2))

    def fmt(v: Any, spec: str = ".3f") -> str:
        return "—" if v is None else format(v, spec)

    print("\n| step | wall s | generate s | reward s | update s | eval s | reward | pass rate | mean length |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by_step = {r["step"]: r for r in logs}
    for s in steps:
        r = by_step.get(s["step"], {})
        print(f"| {s['step']} | {s['wall_s']:.2f} | {s['generate_s']:.2f} | {s['reward_s']:.2f} | {s['update_s']:.2f} "
              f"| {s['eval_s']:.2f} | {fmt(r.get('reward'))} | {fmt(metrics.pass_rate(r), '.2f')} "
              f"| {fmt(r.get('completions/mean_length'), '.0f')} |")
    sh = summary["split_share"]
    mem = f"{peak['max_memory_allocated_gib']:.2f} GiB" if peak else "— (cpu)"
    rw, pr = summary["reward_by_step"], summary["pass_rate_by_step"]
    print("\n| steps | steps/s | steps/s after step 1 | generate | reward | update | eval | peak GPU memory "
          "| reward first→last | pass rate first→last |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print(f"| {n} | {fmt(summary['steps_per_s'])} | {fmt(summary['steps_per_s_after_first'])} "
          + " ".join(f"| {totals[k]:.1f} s ({fmt(sh[k], '.0%')})" for k in keys)
          + f" | {mem} | {fmt(rw[0] if rw else None)}→{fmt(rw[-1] if rw else None)} "
          f"| {fmt(pr[0] if pr else None, '.2f')}→{fmt(pr[-1] if pr else None, '.2f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
