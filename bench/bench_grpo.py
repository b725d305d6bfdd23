"""GRPO on one GPU: steps/s and where a step's time goes (rollout, reward, update, eval).

A self-contained run for the device machine: build a tiny Llama here (no downloads), draw level-1
problems, write them as RL shards (stage 1 + held-out level 1), warm-start the policy with a few
SFT steps on the `lowering` teacher's honest answers to its training problems (a random tiny model
writes no kernels, so every verifier reward would be 0), then run GRPO with verifier rewards
(`drtriton` by default: gated 1 + log speedup, timed on the GPU). Prints a table last and writes
`bench_grpo.json` (+ metrics.jsonl, reward.png) under --out.

    python bench/bench_grpo.py --out /tmp/bench-grpo                    # on a CUDA machine
    python bench/bench_grpo.py --device cpu --problems 2 --steps 2 \\
        --sft-steps 20 --max-new-tokens 64 --hidden 128 --layers 2      # a CPU smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _problems(n: int, heldout: int, max_answer_tokens: int, tokenizer, seed: int):
    """Level-1 problems the lowering teacher can answer within the token budget, and disjoint held-out ones."""
    import synth
    from distill.lowering import lower
    from distill.teacher.prompts import load_prompts  # noqa: F401  (fail early if templates are missing)

    kept, answers, seen = [], {}, set()
    for p in synth.sample(n=(n + heldout) * 4, level=1, seed=seed, unique=True):
        try:
            text = lower(p).completion()
        except Exception:  # noqa: BLE001 - a problem the lowering cannot take is skipped
            continue
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_answer_tokens:
            continue
        kept.append(p)
        answers[p.problem_id] = text
        seen.add(p.dag_hash)
        if len(kept) == n + heldout:
            break
    return kept[:n], kept[n:], answers


def _write_shards(root: Path, train, held, prompt: str) -> None:
    from curriculum.rows import rl_row
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows
    from distill.teacher.prompts import load_prompts

    ps = load_prompts(prompt)
    write_rows([rl_row(p, ps.initial(p), 1, "train", i) for i, p in enumerate(train)], RL_SCHEMA,
               root / "rl" / "stage=1" / "part-00000.parquet")
    if held:
        write_rows([rl_row(p, ps.initial(p), 0, "test", i) for i, p in enumerate(held)], RL_SCHEMA,
                   root / "heldout" / "level=1" / "part-00000.parquet")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/bench-grpo")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--heldout", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--max-new-tokens", type=int, default=1100)
    ap.add_argument("--max-answer-tokens", type=int, default=1000)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--scheme", default="drtriton", choices=["binary", "drtriton", "hrd"])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=None, help="start no step after this many seconds of training")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from pipelines.grpo.config import parse_config
    from pipelines.grpo.rollout import encode_prompt
    from pipelines.grpo.tiny_model import build_tiny_llama
    from pipelines.grpo.trainer import GRPOTrainer
    from pipelines.grpo.warmstart import answer_ids, sft

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_tiny_llama(out / "tiny-llama", hidden_size=args.hidden, num_layers=args.layers,
                             num_heads=max(1, args.hidden // 64), intermediate_size=2 * args.hidden, seed=args.seed)
    tok = AutoTokenizer.from_pretrained(model)
    train, held, answers = _problems(args.problems, args.heldout, args.max_answer_tokens, tok, args.seed)
    _write_shards(out / "data", train, held, "kernelbench-zeroshot")
    t_data = time.perf_counter() - t0
    cfg = parse_config({
        "name": "bench-grpo", "seed": args.seed, "steps": args.steps, "save_every": args.steps, "plot": True,
        "model": {"path": str(model), "device": device},
        "data": {"dir": str(out / "data")},
        "rollout": {"backend": "hf", "group_size": args.group_size, "prompts_per_step": args.prompts,
                    "max_new_tokens": args.max_new_tokens, "temperature": 1.0},
        "reward": {"scheme": args.scheme, "workers": args.workers, "timeout": 60.0},
        "optim": {"lr": 5e-5, "micro_batch": 8},
        "curriculum": {"eval_every": args.eval_every, "eval_size": max(1, args.heldout)},
    }, str(out / "run"))
    t1 = time.perf_counter()
    trainer = GRPOTrainer(cfg, progress=False)
    pairs = [(encode_prompt(tok, t.messages), answer_ids(tok, answers[t.problem_id])) for t in trainer.stages[0].tasks]
    losses = sft(trainer.policy, pairs, steps=args.sft_steps, lr=2e-3, batch=8, seed=args.seed)
    t_sft = time.perf_counter() - t1
    t2 = time.perf_counter()
    with trainer.rewarder:           # start the verifier pool outside the timed steps
        t_pool = time.perf_counter() - t2
        t3 = time.perf_counter()
        recs = trainer.train(time_budget_s=args.budget_s)
        t_train = time.perf_counter() - t3
    trainer.close()

    keys = ("time_rollout_s", "time_reward_s", "time_update_s", "time_eval_s")
    totals = {k: sum(r[k] for r in recs) for k in keys}
    step_total = sum(r["time_step_s"] for r in recs)
    statuses: dict[str, int] = {}
    for r in recs:
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    summary = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
        "model": {"hidden": args.hidden, "layers": args.layers,
                  "params": sum(p.numel() for p in trainer.policy.model.parameters())},
        "steps": len(recs), "group_size": args.group_size, "prompts_per_step": args.prompts,
        "samples_per_step": args.group_size * args.prompts, "max_new_tokens": args.max_new_tokens,
        "scheme": args.scheme, "verifier_workers": args.workers,
        "steps_per_s": len(recs) / step_total, "train_wall_s": t_train, "setup_s": {"data": t_data, "sft": t_sft,
                                                                                    "verifier_pool_start": t_pool},
        "split_s": totals, "split_share": {k: totals[k] / step_total for k in keys},
        "sft_loss_first_last": [losses[0], losses[-1]] if losses else None,
        "reward_mean_by_step": [round(r["reward_mean"], 4) for r in recs],
        "pass_rate_by_step": [round(r["pass_rate"], 4) for r in recs],
        "eval_pass_at_1": [(r["step"], r["eval_pass_at_1"]) for r in recs if "eval_pass_at_1" in r],
        "speedup_median_by_step": [r["speedup_median"] for r in recs],
        "completion_len_mean": statistics.mean(r["completion_len_mean"] for r in recs),
        "statuses": statuses, "speed_term": recs[-1]["speed_term"] if recs else None,
    }
    (out / "bench_grpo.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    print("\n| steps | steps/s | rollout | reward | update | eval | reward mean first→last | pass rate first→last |")
    print("|---|---|---|---|---|---|---|---|")
    sh = summary["split_share"]
    print(f"| {len(recs)} | {summary['steps_per_s']:.3f} | {totals['time_rollout_s']:.1f} s ({sh['time_rollout_s']:.0%}) "
          f"| {totals['time_reward_s']:.1f} s ({sh['time_reward_s']:.0%}) | {totals['time_update_s']:.1f} s "
          f"({sh['time_update_s']:.0%}) | {totals['time_eval_s']:.1f} s ({sh['time_eval_s']:.0%}) "
          f"| {recs[0]['reward_mean']:.3f}→{recs[-1]['reward_mean']:.3f} | {recs[0]['pass_rate']:.2f}→{recs[-1]['pass_rate']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
