"""The parent's side of a job's calls: it keeps the trial schedule and every seed, and hands each
over just before the call that uses it (trusted).

A worker learns a trial's seed with the command that runs that trial, so nothing in its memory
says which inputs come next; the timing sets' seeds come with the timing command. The order:

1. `call warmup`: the first forward, on the decoy weights the candidate was constructed with
   (construct.py) and on inputs from a seed drawn for it: Triton compiles and autotunes here, and
   its outputs are judged like a trial's against the reference's model built on the decoy seed.
2. `reinit`: the constructor's record replayed under the job's real init seed.
3. `call trial t` for every trial, in order. Every one is traced; after the call the parent picks
   (spec.plan's secret choice) whether it is the one replayed, and only then asks for its record
   (`record`): the candidate cannot tell the traced call while it runs.

The replies are assembled into the record `judge.judge_calls` reads. Each reply is watched
(job._watched: scrubbed, what it left running counted by the kernel); the first whose hygiene is
not clean ends the calls.
"""
from __future__ import annotations

from typing import Any, Callable

from distill.verifier import judge, procs

Watched = Callable[[dict[str, Any]], dict[str, Any]]


def run_calls(proc: procs.Proc, spec: Any, load: dict[str, Any], warmup_trial: int,
              watched: Watched) -> dict[str, Any]:
    """The warm-up, the re-initialisation and the trial calls of `spec` (job.JobSpec); returns the `run` record (the
    construction's fields from `load`, `calls`, `fingerprints`, and the first unclean hygiene).
    `warmup_trial`: where the reference put the decoy trial among its trials (the last)."""
    run: dict[str, Any] = {k: load.get(k) for k in ("construct_error", "construct_ops", "construct_launches",
                                                     "state_after_construct")}
    run.update(calls=[], fingerprints=[], run_s={})
    plan = spec.plan()
    t = spec.timeout
    call_seed = spec.seeds[-3]

    def ask(msg: dict[str, Any], phase: str) -> dict[str, Any] | None:
        rep = watched(proc.request(msg, t, phase))
        for k, sec in (rep.pop("run_s", None) or {}).items():
            if isinstance(sec, (int, float)):
                run["run_s"][k] = run["run_s"].get(k, 0.0) + float(sec)
        if isinstance(rep.get("memory"), dict):
            run["memory"] = rep["memory"]
        if judge.hygiene(rep) is not None:
            run["hygiene"] = rep["hygiene"]
            return None
        if rep.get("inputs_not_made"):  # made at load from a decoy seed: after the import, changed
            run["inputs_remade"] = rep["inputs_not_made"]
            return None
        return rep

    if not load.get("ok") or load.get("state_after_construct") or load.get("construct_launches"):
        return run  # judged from the construction alone
    warm = ask({"cmd": "call", "kind": "warmup", "trial": warmup_trial, "seed": spec.decoy[1], "call_seed": call_seed},
               "call warmup")
    if warm is None:
        return run
    run["calls"].append(warm)
    if warm.get("error") is not None or warm.get("state"):
        return run
    again = ask({"cmd": "reinit", "init_seed": spec.seeds[0]}, "re-initialisation")
    if again is None:
        return run
    if again.get("error"):
        run["reinit_error"] = again["error"]
        return run
    for step in plan:
        rep = ask({"cmd": "call", "kind": step["kind"], "trial": step["trial"], "seed": spec.seeds[1 + step["trial"]],
                   "call_seed": call_seed}, f"call {step['kind']} {step['trial']}")
        if rep is None:
            return run
        run["calls"].append(rep)
        run["fingerprints"].append(rep.get("fingerprint"))
        if rep.get("error") is not None or rep.get("state"):
            return run
        if step.get("trace"):  # chosen before the calls, said to the worker only now
            rep["trace"] = watched(proc.request({"cmd": "record"}, t, "record")).get("trace")
    return run
