"""What the closed loop's two slow GPU steps cost, measured apart, so a run can be sized (docs/closed_loop.md).

1. Verifying the lowering teacher's answers as the build does (a VerifierPool on the GPU, problems
   at the `cpu` size profile): candidates/s for the same pairs under each choice of timing baselines
   (`VerifierPool(timing=...)`: eager and torch.compile, eager only, none), a fresh pool each. The
   pass/fail checks are the same; the gaps are what the build pays for each baseline.
2. Greedy decoding with transformers' `generate` of a random Llama of the student's size: ms per new
   token at batch 16 and 200 with the default dynamic cache, and at batch 200 with a static cache
   (which `generate` compiles with torch.compile).

    python3 bench/closed_loop_parts/cost_probe.py --out $OUT/costs.json      # GPU box, after closed_loop_setup.sh
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _pairs(n: int, seed: int) -> list[tuple[Any, str]]:
    import synth
    from distill.lowering import lower
    from distill.teacher.extract import extract

    out = []
    for lv in (1, 2):
        for p in synth.sample(n=n, level=lv, seed=seed, unique=True):
            out.append((p, extract(lower(p).completion(), "stop").code))
    return out


def verification(n: int, workers: int) -> dict[str, Any]:
    from distill.verifier import VerifierPool
    from distill.verifier.pool import TIMING

    pairs = _pairs(n, 101)
    res: dict[str, Any] = {}
    for timing in TIMING:  # the same pairs under each choice of baselines, a fresh pool each
        pool = VerifierPool(workers=workers, device="cuda", timeout=120.0, timing=timing)
        try:
            t = time.perf_counter()
            pool.start()
            start_s = time.perf_counter() - t
            t = time.perf_counter()
            verdicts = pool.verify_many(pairs)
            wall = time.perf_counter() - t
        finally:
            pool.close()
        phases: Counter = Counter()
        for v in verdicts:
            for k, s in (getattr(v, "checks", {}).get("phase_s") or {}).items():
                phases[k] += s
        res[f"timing={timing}"] = {
            "pool_start_s": round(start_s, 1), "pairs": len(pairs), "wall_s": round(wall, 1),
            "candidates_per_s": round(len(pairs) / wall, 2),
            "statuses": dict(Counter(getattr(v, "status", type(v).__name__) for v in verdicts)),
            "worker_s_by_phase": {k: round(s, 1) for k, s in phases.most_common(8)}}
    return res


def decoding(new_tokens: int) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=16384, hidden_size=512, num_hidden_layers=12, num_attention_heads=8,
                      num_key_value_heads=8, intermediate_size=1536, max_position_embeddings=8192)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    out = {}
    for label, batch, extra in (("dynamic_b16", 16, {}), ("dynamic_b200", 200, {}),
                                ("static_b200", 200, {"cache_implementation": "static"})):
        ids = torch.randint(10, 16000, (batch, 480), device="cuda")
        kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0, eos_token_id=1,
                  **extra)
        with torch.no_grad():
            t = time.perf_counter()
            model.generate(**kw, max_new_tokens=16, min_new_tokens=16)   # warm-up (and the compile, if static)
            torch.cuda.synchronize()
            warm = time.perf_counter() - t
            t = time.perf_counter()
            model.generate(**kw, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
            torch.cuda.synchronize()
            s = time.perf_counter() - t
        out[label] = {"ms_per_token_step": round(1000 * s / new_tokens, 2), "warmup_s": round(warm, 1)}
        print(label, out[label], flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=16, help="problems a level, verified once under each timing choice")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    res = {"decoding": decoding(args.new_tokens)}
    res["verification"] = verification(args.problems, args.workers)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
