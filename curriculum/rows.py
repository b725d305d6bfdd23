"""Rows of the SFT and RL shards, built from problems and verified attempts."""
from __future__ import annotations

import json
from typing import Any, Iterable

from synth.problem import Problem

DATA_SOURCE = "tritonforge"
VERIFY_SPEC = {"trials": 5, "device": "cuda", "fallback_device": "cpu", "tolerance": "per-dtype (distill.verifier)"}


def versions() -> dict[str, str]:
    import torch
    import triton

    from importlib.metadata import PackageNotFoundError, version

    try:
        tf = version("tritonforge")
    except PackageNotFoundError:
        tf = "dev"
    return {"torch": torch.__version__, "triton": triton.__version__, "tritonforge": tf}


def baselines(verdict: dict[str, Any]) -> str:
    """Which baselines a verdict's speedups are against (`checks["baselines"]`); verdicts made before
    the choice existed were timed against both on a GPU and against none on the CPU."""
    recorded = (verdict.get("checks") or {}).get("baselines")
    if recorded:
        return recorded
    return "eager+compile" if verdict.get("device") == "cuda" else "off"


def sft_rows(attempts: Iterable[dict[str, Any]], problems: dict[str, Problem],
             vers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One SFT row per passing attempt: the conversation it answered plus the assistant's answer."""
    vers = vers or versions()
    rows = []
    for a in attempts:
        if a["status"] != "pass" or not a.get("candidate"):
            continue
        p = problems[a["problem_id"]]
        verdict = json.loads(a["verdict"]) if a.get("verdict") else {}
        answer = a["completion"]
        rows.append({
            "messages": list(a["messages"]) + [{"role": "assistant", "content": answer}],
            "problem_id": p.problem_id, "dag_hash": p.dag_hash, "level": p.level, "ops": list(p.ops),
            "candidate": a["candidate"], "reasoning": a.get("reasoning") or "",
            "status": a["status"], "reason": a.get("reason", ""),
            "speedup_eager": a.get("speedup_eager"), "speedup_compile": a.get("speedup_compile"),
            "kernel_ms": a.get("kernel_ms"), "device": verdict.get("device"), "baselines": baselines(verdict),
            "teacher": a["teacher"], "teacher_model": a.get("teacher_model", ""),
            "sampling_params": a.get("sampling_params", "{}"), "seed": a.get("seed"),
            "sample": a["sample"], "round": a["round"],
            "versions": json.dumps({**vers, **(verdict.get("versions") or {})}, sort_keys=True),
        })
    return rows


def rl_row(problem: Problem, prompt: list[dict[str, str]], stage: int, split: str, index: int) -> dict[str, Any]:
    """A verl/TRL row: the prompt as chat messages and, as ground truth, the reference and how to verify."""
    truth = {"reference": problem.source, "problem_id": problem.problem_id, "dag_hash": problem.dag_hash,
             "level": problem.level, "input_shapes": problem.input_shapes, "output_shapes": problem.output_shapes,
             "flops": problem.flops, "bytes_moved": problem.bytes_moved, "verify": VERIFY_SPEC,
             # what the verifier needs to make the problem's twins (synth.problem.Problem.twin)
             "profile": problem.profile, "recipe": problem.recipe}
    return {
        "data_source": DATA_SOURCE if problem.data_source == "synth" else problem.data_source,
        "prompt": prompt, "ability": "triton",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, sort_keys=True)},
        "extra_info": {"index": index, "split": split, "stage": stage, "level": problem.level,
                       "dag_hash": problem.dag_hash, "ops": list(problem.ops), "seed": problem.seed,
                       "problem_id": problem.problem_id},
        "reference": problem.source, "problem_id": problem.problem_id, "level": problem.level, "stage": stage,
    }
