"""One GRPO step's time with the static-cache rollouts (pipelines/grpo/decode.py) against TRL's `generate`.

The closed loop's GRPO (docs/closed_loop.md) took 192 s a step of 32 completions on an H100, nearly all
of it in `generate` (72-82 ms a token, host-bound). This runs `train-grpo` on a random Llama of the
closed loop's `gpu` student size (12 layers, hidden 512, 8 heads, MLP 1536; its tokenizer trained on
the prompt templates, so its vocabulary is smaller than the student's), prompts drawn on the spot,
the `toy` reward (no verifier: the step is generation plus training), 8 completions of 4 prompts a
step. The random model ends most answers early (on an H200, 3-9% ran to 3,072 tokens, the mean ~950),
but a batch decodes until its longest answer ends, so each step decodes the full `max_completion_length`.
Each engine runs in its own process (`python -m pipelines.cli train-grpo`); the first step carries
compiles and graph capture, so the table reports the steps after it too.

    python3 bench/bench_grpo_rollouts.py --out /tmp/rollouts                       # GPU box (~2 minutes)
    python bench/bench_grpo_rollouts.py --out /tmp/rollouts --small --new 16 --generate-new 16   # CPU smoke

Prints a table (engine, completion tokens, steps, step_time, mean and longest completion, step ms per token
of the longest, rollout seconds, ms a decode step) and writes OUT/bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def config(out: Path, model: Path, rollouts: str, new: int, steps: int) -> Path:
    text = "\n".join([
        'name = "rollouts"', "plot = false", f'rollouts = "{rollouts}"', "",
        "[model]", f'path = "{model}"', "",
        "[data.synth]", 'prompt = "kernelbench-zeroshot"', "heldout_size = 4",
        "[[data.synth.stage]]", "index = 1", "levels = [1]", "size = 16", "",
        "[reward]", 'scheme = "toy"', "",
        "[curriculum]", "eval_every = 1000", "eval_size = 1", "",
        "[grpo]", "seed = 0", f"max_steps = {steps}", "save_steps = 1000", "num_generations = 8",
        "per_device_train_batch_size = 32", f"max_completion_length = {new}", "temperature = 1.0",
        "learning_rate = 1e-5", "beta = 0.0", "",
    ])
    path = out / f"{rollouts}-{new}.toml"
    path.write_text(text)
    return path


def run(out: Path, model: Path, rollouts: str, new: int, steps: int) -> dict:
    cfg = config(out, model, rollouts, new, steps)
    dest = out / f"{rollouts}-{new}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "train-grpo", str(cfg), "--out", str(dest)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return {"rollouts": rollouts, "new": new, "failed": proc.returncode}
    recs = [json.loads(line) for line in (dest / "metrics.jsonl").read_text().splitlines()]
    later = recs[1:] or recs
    mean = lambda key, rs: sum(r.get(key, 0.0) for r in rs) / len(rs)   # noqa: E731
    row = {"rollouts": rollouts, "new": new, "steps": len(recs), "step_time_first": recs[0]["step_time"],
           "step_time_later": mean("step_time", later), "mean_length": mean("completions/mean_length", later),
           "max_length": mean("completions/max_length", later)}
    # a batch decodes until its longest answer ends: the per-token figures divide by that length
    row["step_ms_per_token"] = 1000 * row["step_time_later"] / max(row["max_length"], 1)
    if "rollouts/seconds" in recs[0]:
        row["rollout_s_later"] = mean("rollouts/seconds", later)
        row["ms_per_decode_step"] = 1000 * row["rollout_s_later"] / max(row["max_length"], 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--new", type=int, default=3072, help="completion tokens for the static rollouts")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--generate-new", type=int, default=128, help="completion tokens for generate (0: skip)")
    ap.add_argument("--generate-steps", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="a 2-layer model (CPU smoke)")
    a = ap.parse_args()
    from pipelines.grpo.tiny_model import _corpus, build_llama

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    size = dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128) if a.small else \
        dict(hidden_size=512, num_layers=12, num_heads=8, intermediate_size=1536)
    model = build_llama(out / "model", _corpus(), vocab_size=16384, seed=0, **size)
    rows = [run(out, model, "static", a.new, a.steps)]
    if a.generate_new:
        rows.append(run(out, model, "generate", a.generate_new, a.generate_steps))
    (out / "bench.json").write_text(json.dumps(rows, indent=1))
    keys = ["rollouts", "new", "steps", "step_time_first", "step_time_later", "mean_length", "max_length",
            "step_ms_per_token",
            "rollout_s_later", "ms_per_decode_step"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{r[k]:.3g}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys) + " |")
    return 1 if any("failed" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
