"""Teacher-stage throughput vs a bare `LLM.generate`, same engine, same prompts, same run.

The teacher stage is everything `tritonforge distill --no-verify` does per round: render the
prompts, submit every conversation at once through the chat API with per-request seeds, stream
the answers back, extract reasoning/code, and build the rows. The baseline is `LLM.generate` on
the already-rendered prompt texts with the same SamplingParams (same seeds, so both runs generate
the same tokens; the script checks they do). Each repeat runs both paths back to back (order
alternating), the prefix cache is reset before each run, and the headline is the median of the
per-repeat ratios, which cancels most of the drift caused by other work on a shared machine.

    .venv/bin/python bench/bench_teacher.py [--problems 32] [--samples 4] [--max-tokens 256]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))


def _problems(n: int):
    try:
        import synth

        return synth.sample(n=n, levels=[1, 2, 3, 5], seed=0)
    except Exception as exc:  # noqa: BLE001 - the sampler is optional here: fall back to the fixture problems
        print(f"(synth.sample unavailable: {exc}; using fixture problems)", file=sys.stderr)
        import dataclasses

        import kernelbench_small as kb

        base = kb.problems()
        return [dataclasses.replace(base[i % len(base)], problem_id=f"p{i:03d}") for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: build the tiny Llama)")
    ap.add_argument("--problems", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", default="kernelbench")
    args = ap.parse_args()

    from distill.teacher.base import SamplingConfig, TeacherOptions
    from distill.teacher.prompts import load_prompts
    from distill.teacher.refine import _first_requests, run_distill
    from distill.teacher.vllm_backend import VLLMTeacher

    model = args.model
    if model is None:
        from tiny_model import build_tiny_llama

        model = str(build_tiny_llama(Path(tempfile.gettempdir()) / "tritonforge-bench-tiny-llama"))
    problems = _problems(args.problems)
    prompts = load_prompts(args.prompt)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_tokens=args.max_tokens)
    teacher = VLLMTeacher(model, TeacherOptions(sampling=sampling, engine_kwargs={"max_model_len": 4096}))
    llm = teacher.llm

    # The bare baseline: the same conversations rendered to text up front, the same params.
    reqs = _first_requests(problems, prompts, args.samples, sampling.base_seed)
    texts = [teacher.tokenizer.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in reqs]
    params = [teacher._params(r) for r in reqs]

    def bare() -> tuple[int, float, list[str]]:
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        outs = llm.generate(texts, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        return sum(len(c.token_ids) for o in outs for c in o.outputs), dt, [c.text for o in outs for c in o.outputs]

    def stage() -> tuple[int, float, list[str]]:
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        rows = run_distill(problems, teacher, prompts, samples=args.samples, rounds=0, sampling=sampling)
        dt = time.perf_counter() - t0
        return sum(r.completion_tokens or 0 for r in rows), dt, [r.completion for r in rows]

    stage()  # warm-up: first-use costs of both paths out of the measurement
    bare()
    runs: dict[str, list[tuple[int, float]]] = {"bare LLM.generate": [], "teacher stage": []}
    texts_seen: dict[str, list[str]] = {}
    pairs = (("bare LLM.generate", bare), ("teacher stage", stage))
    for i in range(args.repeats):
        # Each repeat is a back-to-back pair, order alternating, so drifting load from other
        # processes on the machine hits both paths alike; the headline is the median paired ratio.
        for name, fn in (pairs if i % 2 == 0 else pairs[::-1]):
            toks, dt, outs = fn()
            runs[name].append((toks, dt))
            texts_seen[name] = outs
    same = texts_seen["bare LLM.generate"] == texts_seen["teacher stage"]

    print(f"\nmodel: {model}\nproblems: {len(problems)} x {args.samples} samples, max_tokens {args.max_tokens}, "
          f"prompt set {args.prompt}, vllm {teacher.provenance()['vllm_version']}")
    print(f"identical generated text in both paths: {same}\n")
    print("| path | tokens | median s | tokens/s (median) | runs (tokens/s) |")
    print("|---|---:|---:|---:|---|")
    med = {}
    for name, rs in runs.items():
        secs = statistics.median(dt for _, dt in rs)
        toks = rs[0][0]
        med[name] = toks / secs
        each = ", ".join(f"{t / d:,.0f}" for t, d in rs)
        print(f"| {name} | {toks:,} | {secs:.2f} | {toks / secs:,.0f} | {each} |")
    paired = [b_dt / t_dt for (_, b_dt), (_, t_dt) in zip(runs["bare LLM.generate"], runs["teacher stage"])]
    ratio = statistics.median(paired)
    print(f"| **teacher / bare** | | | **{ratio:.1%}** (median of paired runs) | "
          f"{', '.join(f'{r:.1%}' for r in paired)}; ratio of medians {med['teacher stage'] / med['bare LLM.generate']:.1%} |")
    print(f"\ntarget >= 90%; load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    teacher.close()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
