"""The parent's side of the replay: what a replayer gets, and what its answer decides.

After the worker's trials pass, the parent takes the record of the traced call from the worker's
report (replay.serialise: a claim like everything else the worker says), cuts the kernels module out
of the candidate's source itself (kernelsrc.py), checks every tensor the record says existed before
forward against the reference's parameters (statecheck.py: accepted ones keep the worker's bytes,
the others are poisoned), and has a replayer (replayer.py, a process that never imported the
candidate's module) run the record three times: on the replay trial, whose seed only the reference
and the replayer know; on another of the worker's trials (determinism against that trial's own
call); on the replay trial with the candidate's launches left out. judge.judge_replay decides.

So the worker produces no evidence the verdict rests on: a forged record either replays into the
reference's outputs for inputs the worker never saw, from the candidate's Triton kernels alone (which
is the candidate computing the answer with Triton), or fails.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distill.verifier import judge, kernelsrc, procs, statecheck

if TYPE_CHECKING:
    from distill.verifier.job import JobSpec
    from distill.verifier.pool import VerifierPool

RUNS = [{"name": "secret", "inputs": "secret"}, {"name": "other", "inputs": "other"},
        {"name": "ablate", "inputs": "secret", "ablate": True}]


def _traced(run: dict[str, Any], trial: int) -> dict[str, Any] | None:
    for call in run.get("calls") or []:
        if isinstance(call, dict) and call.get("trial") == trial and isinstance(call.get("trace"), dict):
            return call
    return None


def _own_call(run: dict[str, Any], trial: int) -> dict[str, Any] | None:
    return next((c for c in run.get("calls") or [] if isinstance(c, dict) and c.get("trial") == trial), None)


def _launched(record: dict[str, Any]) -> set[str]:
    return {st[1] for st in record.get("steps") or [] if type(st) is list and len(st) > 1 and st[0] == "launch"
            and type(st[1]) is str}


def _state(record: dict[str, Any], params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The record's storages as the replayer gets them, what each state one was taken as, and the
    poisoned ones named for a reason (its first layout: dtype and bytes)."""
    storages, kinds, poisoned = [], [], []
    for s in record.get("storages") or []:
        if not isinstance(s, dict) or s.get("kind") != "state":
            storages.append(s)
            continue
        taken = statecheck.classify(s, params or {})
        kinds.append(taken or "poisoned")
        if taken:
            storages.append(s)
        else:
            storages.append({k: v for k, v in s.items() if k != "data"} | {"kind": "poison"})
            poisoned.append(f"a {s.get('dtype')} tensor of {s.get('nbytes')} bytes")
    return storages, kinds, poisoned


def check(pool: "VerifierPool", gpu: int, spec: "JobSpec", ref: dict[str, Any], run: dict[str, Any],
          found: judge.Finding) -> judge.Finding:
    """The replay's finding (None status: it held), with the trials' checks kept beside it."""
    checks = found.checks
    call = _traced(run, spec.traced)
    if call is None:
        return judge.Finding("not_triton", "no call could be replayed: the traced trial sent no record of its "
                             "launches", checks)
    record = call["trace"]
    if record.get("error"):
        return judge.Finding("not_triton", f"its kernels could not be replayed without its Python: not replayable: "
                             f"{record['error']}"[:1000], checks)
    source = kernelsrc.extract(spec.candidate)
    missing = sorted(_launched(record) - set(source.kernels))
    if source.error or missing:
        what = source.error or f"kernel {missing[0]} is not rebuilt from the module's source: " \
            f"{source.why_missing(missing[0])}"
        return judge.Finding("not_triton", f"its kernels could not be replayed without its Python: not replayable: "
                             f"{what}"[:1000], checks)
    storages, kinds, poisoned = _state(record, ref.get("params") or {})
    checks = {**checks, "replay_state": kinds} if kinds else checks
    trials = ref["trials"]
    msg = {"cmd": "replay", "problem": spec.source, "kernels": source.text, "kernel_names": source.kernels,
           "trace": {**record, "storages": storages}, "byte_limit": pool.max_memory_mb << 20, "runs": RUNS,
           "seeds": {"secret": spec.seeds[1 + spec.replay_trial], "other": spec.seeds[1 + spec.other]}}
    proc = pool.acquire_replayer(gpu)
    broken = True
    try:
        rep = proc.request(msg, spec.timeout, "replay", total=spec.timeout * (len(RUNS) + 2))
    except procs.ProcTimeout as exc:
        return judge.Finding("timeout", f"replaying its kernels ({exc.phase}) ran past its {exc.seconds:g} s limit", checks)
    except procs.ProcDied as exc:
        if pool.memory.tripped(proc.pid):
            return judge.Finding("crash", f"the replay process was killed at the {pool.max_memory_mb} MB memory limit",
                                 checks)
        return judge.Finding("crash", f"the replay process died while its kernels ran: {exc}", checks)
    except procs.ProcProtocol as exc:
        return judge.Finding("forbidden", f"at run time: {exc} (the replay's channel)", checks)
    else:
        fresh = judge.judge_replay(rep, trials[spec.replay_trial], trials[spec.other], _own_call(run, spec.other),
                                   spec.device, poisoned, checks)
        broken = fresh.status is not None  # kept only after a clean replay, like a worker after a pass
        _same_inputs(rep, trials, spec)
        return fresh
    finally:
        pool.release_replayer(gpu, proc, broken)


def _same_inputs(rep: dict[str, Any], trials: list[dict[str, Any]], spec: "JobSpec") -> None:
    """The replayer made its inputs from the same seeds as the reference (both trusted): a problem
    whose `get_inputs` ignores the seed is the problem's fault, as in judge_calls."""
    prints = rep.get("fingerprints") or {}
    for name, index in (("secret", spec.replay_trial), ("other", spec.other)):
        if name in prints and prints[name] != trials[index]["fingerprint"]:
            from distill.verifier.problemio import ProblemError

            raise ProblemError("get_inputs() made different inputs from the same seed in the reference and the "
                               "replayer: inputs must come from torch/random/numpy RNGs seeded by the harness")
