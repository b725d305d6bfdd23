"""Stage `eval`: held-out greedy pass@1 through the project's VerifierPool, per test set and level.

For each test problem (eval-sets/{dag,ops}/level=L) the model answers the prompt the build wrote
for it (greedy, `max_new_tokens` from the student stage, decoded by pipelines/grpo/decode.py), the teacher-side
extractor takes the code
(an answer that never ended is `truncated`, as a teacher's would be), and the VerifierPool verifies
it against the problem itself (from the build's problems shards: its resized twin is checked too,
as in the build). Recorded per (set, level): problems, passes, pass@1, passes faster than eager (GPU
only: the CPU times nothing), and the verdict breakdown; per problem: status, speedup, reason and
the completion (eval/TAG.jsonl).

Models: `base` (the random student, its answers cut at BASE_MAX_NEW_TOKENS), `sft`, `grpo` (train-grpo's last complete checkpoint, or
`--checkpoint N`). The tag is the stage's name, or `grpo@N` for a checkpoint, which the report
plots over GRPO steps.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from closed_loop_parts.common import Layout, StageClock, StageError, read_json, write_json
from closed_loop_parts.profiles import Profile

SETS = ("dag", "ops")
# The random-weight student writes no code and never stops: its answers are cut here rather than at
# the SFT model's length (the same verdict, `truncated`, for a tenth of the decoding).
BASE_MAX_NEW_TOKENS = 256


def model_for(lay: Layout, stage: str, checkpoint: str | None) -> tuple[Path, str, int | None]:
    """(model folder, tag, GRPO step) of the model a stage evaluates."""
    if stage == "base":
        path, tag, step = lay.base, "base", None
    elif stage == "sft":
        path, tag, step = lay.sft_model, "sft", 0
    else:
        from pipelines.grpo.trainer import last_complete_checkpoint

        last = last_complete_checkpoint(lay.grpo)
        if checkpoint and checkpoint != "last":
            path = lay.grpo / f"checkpoint-{int(checkpoint)}"
        elif last is None:
            raise StageError(f"no complete GRPO checkpoint under {lay.grpo}: run the `grpo` stage first")
        else:
            path = Path(last)
        step = int(path.name.split("-")[1])
        tag = "grpo" if path == Path(last or "") and checkpoint in (None, "last") else f"grpo@{step}"
    if not (path / "config.json").is_file():
        raise StageError(f"no model at {path}: run the stage that makes it first")
    return path, tag, step


def test_sets(lay: Layout, p: Profile) -> list[tuple[str, int, list[dict[str, Any]]]]:
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    out = []
    for name in SETS:
        for lv in p.levels:
            rows = read_folder(lay.eval_sets / name / f"level={lv}", RL_SCHEMA).to_pylist()
            out.append((name, lv, rows))
    if not any(rows for _, _, rows in out):
        raise StageError(f"no test problems under {lay.eval_sets}: run the `data` stage first")
    return out


def heldout_problems(lay: Layout) -> dict[str, Any]:
    from synth.shard import read_problems

    return {pr.problem_id: pr for f in sorted((lay.build / "problems").glob("heldout-*.parquet"))
            for pr in read_problems(f)}


def generate(model_dir: Path, prompts: list[list[dict[str, str]]], max_new_tokens: int, batch: int, device: str,
             deadline: float) -> list[tuple[str, bool, int] | None]:
    """Greedy answers (text, ended with EOS, new tokens), batched by prompt length, decoded by
    `pipelines.grpo.decode.StaticDecoder` (one CUDA graph a step on a GPU; temperature 0); None where the
    deadline passed before the prompt's batch began."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.grpo.decode import StaticDecoder

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[tuple[str, bool, int] | None] = [None] * len(texts)
    for start in range(0, len(order), batch):
        if time.monotonic() > deadline:
            break
        idx = order[start:start + batch]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        dec = StaticDecoder(model, len(idx), enc["input_ids"].shape[1], max_new_tokens, tok.eos_token_id,
                            tok.pad_token_id)
        rows = dec.run(enc["input_ids"], enc["attention_mask"])
        del dec
        for row, i in zip(rows, idx):
            ended = row[-1:] == [tok.eos_token_id]
            out[i] = (tok.decode(row, skip_special_tokens=True), ended, len(row))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def verify(pairs: list[tuple[Any, str, bool]], device: str, workers: int, timeout: float,
           timing: str = "eager", deadline: float | None = None) -> list[dict[str, Any] | None]:
    """Verdicts of (problem, answer text, ended) triples: extraction first, then the pool (identical
    pairs once), one thread per worker taking the pairs in the order given; None for the pairs not
    started by `deadline` (a monotonic time).

    No chunks: a chunk waits for its slowest pair, so with a 120 s verify timeout one slow answer held
    23 idle workers and carried the stage past its deadline (fifth run: verification 255 s of a 180 s
    stage). Here a pair that would start past the deadline is not started; those in flight finish."""
    from distill.teacher.extract import extract
    from distill.verifier import VerifierPool

    results: list[dict[str, Any] | None] = [None] * len(pairs)
    jobs: dict[tuple[str, str], list[int]] = {}
    problems: dict[str, Any] = {}
    for i, (problem, text, ended) in enumerate(pairs):
        ex = extract(text, "stop" if ended else "length")
        if not ex.ok:
            results[i] = {"status": ex.status, "reason": ex.reason, "speedup_eager": None}
        else:
            problems[problem.problem_id] = problem
            jobs.setdefault((problem.problem_id, ex.code), []).append(i)
    keys = list(jobs)
    if keys and (deadline is None or time.monotonic() < deadline):
        from concurrent.futures import ThreadPoolExecutor

        from distill.verifier.handout import PoolError
        from distill.verifier.problemio import ProblemError

        def one(key: tuple[str, str]) -> None:
            if deadline is not None and time.monotonic() > deadline:
                return
            try:
                v: Any = pool.verify(problems[key[0]], key[1])
                rec = {"status": v.status, "reason": v.reason[:300], "speedup_eager": v.speedup_eager}
            except (ProblemError, PoolError) as exc:
                rec = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300], "speedup_eager": None}
            for i in jobs[key]:
                results[i] = rec

        pool = VerifierPool(workers=workers, device=device, timeout=timeout, timing=timing)
        try:
            pool.start()
            with ThreadPoolExecutor(max_workers=workers) as ex:
                list(ex.map(one, keys))
        finally:
            pool.close()
    return results


def interleaved(items: list[Any], key: Any) -> list[int]:
    """Positions of `items` taking one of each `key` in turn (first appearance order), so a budget that
    cuts the tail cuts every (set, level) alike."""
    groups: dict[Any, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(key(it), []).append(i)
    out: list[int] = []
    queues = list(groups.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """pass@1, passes faster than eager and the verdict breakdown of one (set, level)'s records."""
    n = len(records)
    passed = [r for r in records if r["status"] == "pass"]
    faster = [r for r in passed if (r["speedup_eager"] or 0) > 1.0]
    timed = [r for r in passed if r["speedup_eager"] is not None]
    return {"n": n, "passed": len(passed), "pass_at_1": len(passed) / n if n else None,
            "faster_than_eager": len(faster) if timed else None,
            "faster_share_of_passes": len(faster) / len(passed) if timed else None,
            "faster_share_of_all": len(faster) / n if timed and n else None,
            "verdicts": dict(Counter(r["status"] for r in records).most_common()),
            "ended_share": sum(r["ended"] for r in records) / n if n else None,
            "mean_new_tokens": sum(r["new_tokens"] for r in records) / n if n else None}


def run(lay: Layout, p: Profile, stage: str, checkpoint: str | None, limit: int | None,
        budget_s: float | None) -> dict[str, Any]:
    """Evaluate one model on every test set; writes eval/TAG.json and eval/TAG.jsonl."""
    model, tag, step = model_for(lay, stage, checkpoint)
    student = read_json(lay.out / "student.json", "student")
    with StageClock(lay, f"eval-{tag}", p.device) as clock:
        # The budget is the stage's: generation may use half of it, verification what is left. A problem
        # not reached by either is counted in `not_reached_by_budget`, not as a failure.
        budget = budget_s or p.eval_budget_s
        start = time.monotonic()
        sets = [(name, lv, rows[:limit] if limit else rows) for name, lv, rows in test_sets(lay, p)]
        flat = [(name, lv, r) for name, lv, rows in sets for r in rows]
        t0 = time.perf_counter()
        max_new = min(BASE_MAX_NEW_TOKENS, student["max_new_tokens"]) if stage == "base" else student["max_new_tokens"]
        answers = generate(model, [r["prompt"] for _, _, r in flat], max_new, p.eval_batch, p.device,
                           start + budget / 2)
        gen_s = time.perf_counter() - t0
        problems = heldout_problems(lay)
        done = [(f, a) for f, a in zip(flat, answers) if a is not None]
        done = [done[i] for i in interleaved(done, lambda d: (d[0][0], d[0][1]))]
        t1 = time.perf_counter()
        verdicts = verify([(problems[r["problem_id"]], a[0], a[1]) for (_, _, r), a in done], p.device,
                          p.eval_workers, p.verify_timeout, p.eval_timing, start + budget)
        ver_s = time.perf_counter() - t1
        records = [{"set": name, "level": lv, "problem_id": r["problem_id"], "ended": a[1], "new_tokens": a[2],
                    **v, "completion": a[0]} for ((name, lv, r), a), v in zip(done, verdicts) if v is not None]
        result = {"tag": tag, "stage": stage, "grpo_step": step, "model": str(model),
                  "max_new_tokens": max_new, "not_reached_by_budget": len(flat) - len(records),
                  "seconds": {"generate": round(gen_s, 1), "verify": round(ver_s, 1)}, "sets": {}}
        for name, lv, _ in sets:
            mine = [x for x in records if x["set"] == name and x["level"] == lv]
            result["sets"].setdefault(name, {})[str(lv)] = summarize(mine)
        clock.extra["result"] = result
        write_json(lay.evals / f"{tag}.json", result)
        lay.evals.mkdir(parents=True, exist_ok=True)
        (lay.evals / f"{tag}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records))
    return result
