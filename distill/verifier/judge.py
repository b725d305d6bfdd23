"""Trusted verdict logic: turns what a worker reported, and the reference's expected values, into a status.

Runs in the parent on copied data. A worker's report is evidence, not a verdict: outputs are
compared here against values the worker never saw, and every field the worker sends can only make
its own verdict worse (an error, a denial, a compute op), never produce a `pass` by itself.
"""
from __future__ import annotations

import statistics
from typing import Any

from distill.verifier import callstream, policy, protocol, tolerance
from distill.verifier.compare import Finding, bound_of, compare_outputs


def _denial_reason(denials: list[dict]) -> str:
    d = denials[0]
    return f"at run time: {d.get('detail', d.get('event'))} ({d.get('category')})"


def left_behind(rec: protocol.Hygiene | protocol.CallReport | protocol.ReplayRun) -> Finding | None:
    """State the candidate left for the verifier's own steps, or its code run inside them (seal.py,
    the guard's harness-step profile): `forbidden`. `rec`: a reply's hygiene, a call's or a replay run's report."""
    if rec.get("state"):
        return Finding("forbidden", f"at run time: left {rec['state'][0]} for the verifier's own steps "
                       "(state outlives its code)", {"state": rec["state"]})
    if rec.get("harness_code"):
        return Finding("forbidden", f"at run time: its code ran inside the verifier's own steps "
                       f"({rec['harness_code'][0]}): a hook, mode or finalizer left behind",
                       {"harness_code": rec["harness_code"]})
    return None


def hygiene(report: Any) -> Finding | None:
    """Denials, patched attributes or extra threads outside audited calls: all `forbidden`. `report`: a
    worker's or a replayer's reply (each carries a protocol.Hygiene)."""
    hyg: protocol.Hygiene = report.get("hygiene") or {}
    if hyg.get("denials"):
        return Finding("forbidden", _denial_reason(hyg["denials"]), {"denials": hyg["denials"]})
    if hyg.get("disk_bytes"):
        return Finding("forbidden", f"at run time: wrote {hyg['disk_bytes'] >> 20} MiB into its scratch folder "
                       "(disk cap)")
    left = left_behind(hyg)
    if left:
        return left
    if hyg.get("patched"):
        return Finding("forbidden", f"at run time: patched {', '.join(hyg['patched'][:3])} (torch patching)",
                       {"patched": hyg["patched"]})
    if hyg.get("processes", 0) > 0:
        return Finding("forbidden", "at run time: started a process that is still running (process)")
    if hyg.get("threads", 0) > 0:
        return Finding("forbidden", "at run time: started a thread that is still running (threads)")
    if hyg.get("blocked"):
        ops = ", ".join(sorted(hyg["blocked"]))
        return Finding("not_triton", f"ATen compute outside forward's audit: {ops}")
    return None


def compute_ops(call: protocol.CallReport | protocol.TimeReply | protocol.TimeReplayReply,
                moves_are_work: bool = False) -> list[str]:
    """The compute a call ran besides its own kernels; with `moves_are_work` (the reference's forward
    only moves values: copies_are_work) the copies that move values count too."""
    ops = [op for op in (call.get("aten") or {})
           if policy.is_compute(op) or (moves_are_work and op in policy.MOVES_VALUES)]
    return sorted(set(ops) | set(call.get("blocked") or {}))


def copies_are_work(ref_forward: dict[str, int] | None) -> bool:
    """Whether the problem's whole work is moving values: its reference's forward ran ops, none of them
    compute (views, layout copies, widening casts). Unknown (an older reference reply): no."""
    return bool(ref_forward) and not any(policy.is_compute(op) for op in ref_forward)


def error_status(err: protocol.Failure, call: Any) -> Finding:
    """`err` as the worker (or a replayer's timing) reported it; `call`: the report beside it (its denials, ops)."""
    if call.get("denials") or err.get("denied"):
        denials = call.get("denials") or [{"detail": err.get("message")}]
        return Finding("forbidden", _denial_reason(denials), {"denials": denials})
    ops = compute_ops(call)
    if ops:
        return Finding("not_triton", f"ATen compute ran inside forward: {', '.join(ops[:5])}")
    msg = f"{err.get('type')}: {err.get('message', '')}".strip()[:300]
    if err.get("sandbox"):
        return Finding("forbidden", f"at run time: the sandbox refused an operation: {msg}")
    if err.get("cuda_fault"):
        return Finding("crash", f"CUDA fault: {msg}")
    if err.get("compile"):
        return Finding("compile_error", f"Triton compilation failed: {msg}")
    return Finding("runtime_error", f"forward raised {msg}")


def widened(trials: list[protocol.Trial], bounds: list[list[Any]]) -> list[protocol.Trial]:
    """`trials` with each output's bound the wider, field by field, of the screening's and the one
    measured on that trial's own inputs (reference.trial_bounds); both within the dtype table, or past it
    only where the honest error measured so (tolerance.fitted: up to tolerance.CEILING)."""
    out = []
    for trial, own in zip(trials, bounds):
        tols = []
        for k, rec in enumerate(trial.get("tolerances") or []):
            mine = own[k] if k < len(own) else None
            if not rec or not mine:
                tols.append(rec)
                continue
            tols.append({**rec, **{f: max(rec[f], mine[f]) for f in ("norm_rel", "atol_rel", "rtol", "det_rel")},
                         "basis": "measured on this trial" if mine["norm_rel"] > rec["norm_rel"] else rec.get("basis")})
        out.append({**trial, "tolerances": tols})
    return out


def follows_reference(calls: dict[int, protocol.CallReport], trials: list[protocol.Trial]) -> Finding | None:
    """The bound on input-independent answers (callstream.py), over calls in hand."""
    return callstream.follows_reference(calls, trials)


def inputs_changed(call: protocol.CallReport) -> str | None:
    changed = call.get("inputs_changed")
    if changed is None:
        return "the worker did not report whether inputs changed"
    return f"input {changed[0]} changed during forward" if changed else None


def construct_compute(cand: dict[str, int], ref: dict[str, int]) -> list[str]:
    """Compute ops the candidate's constructor ran beyond the reference's own (per op, by count) and
    the initialisers: precomputing from its parameters is work the timing would never see."""
    out = []
    for op, n in sorted(cand.items()):
        if policy.is_compute(op) and op not in policy.INITIALISERS and n > ref.get(op, 0):
            out.append(f"{op} x{n - ref.get(op, 0)}")
    return out


def judge_calls(run: protocol.RunReply, trials: list[protocol.Trial], device: str,
                ref_construct: dict[str, int] | None = None, stream: Any = None,
                ref_forward: dict[str, int] | None = None) -> Finding:
    """Statuses in DESIGN §4 order for each call (the replay is judged after, `judge_replay`). `stream`
    (callstream.CallStream): the calls as judged when they arrived, their outputs compared then; without
    it, `run["calls"]` carry their outputs and are judged here the same way."""
    if stream is None:
        stream = callstream.CallStream.over(run.get("calls") or [], trials, device)
    moves = copies_are_work(ref_forward)
    prints = run.get("fingerprints")
    if prints is not None and prints != [t["fingerprint"] for t in trials][:len(prints)]:
        # Screening made the problem's inputs twice from one seed and got the same (screen.py), so a
        # worker that reports others was changed by its candidate (or its report was): never the
        # problem's fault, which would drop the sample instead of judging it.
        return Finding("forbidden", "at run time: the worker's inputs differ from the reference's for the same "
                                    "seeds (input making changed)")
    if run.get("inputs_remade"):  # inputsets.py: a hook changed how inputs are made after its import
        return Finding("forbidden", f"at run time: {run['inputs_remade']} (input making changed)")
    if run.get("construct_error"):
        err = run["construct_error"]
        f = error_status(err, {"denials": (run.get("hygiene") or {}).get("denials")})
        if f.status == "runtime_error":
            f = Finding("compile_error", f"constructing ModelNew failed: {err.get('type')}: {err.get('message', '')}"[:300])
        return f
    if run.get("state_after_construct"):
        return Finding("forbidden", f"construction left {run['state_after_construct'][0]} for the verifier's own "
                       "steps (state outlives its code)", {"state": run["state_after_construct"]})
    # Checked before the ops: the CPU lane's interpreter shows such launches as ATen ops too.
    if run.get("early_launches"):
        return Finding("not_triton", f"launched its own Triton kernels before forward, at import or construction: "
                       f"{', '.join(run['early_launches'][:4])} (work the timing never sees)",
                       {"early_launches": run["early_launches"]})
    # One rule for the module's import and its constructor: both run before anything is timed.
    imported, built = run.get("import_ops") or {}, run.get("construct_ops") or {}
    extra = construct_compute({op: imported.get(op, 0) + built.get(op, 0) for op in {*imported, *built}},
                              ref_construct or {})
    if extra:
        when = " and ".join(w for w, ops in (("import", imported), ("construction", built))
                            if construct_compute(ops, {}))
        return Finding("not_triton", f"computed with torch at {when or 'construction'}: {', '.join(extra[:4])} "
                       "(beyond creating the reference's parameters the reference's way)",
                       {"construct_ops": built, "import_ops": imported})
    per_trial: list[dict[str, Any]] = []
    first: dict[int, protocol.CallReport] = {}
    checks: dict[str, Any] = {"trials": per_trial}
    if prints is not None:  # input sets the worker made from seeds: its trials' (timing sets go to the timer)
        checks["worker_input_sets"] = len(prints)
    if trials and trials[0].get("tolerances"):  # each output's bound and how it was set (screen.py)
        checks["tolerance"] = trials[0]["tolerances"]
    for n, call in enumerate(stream.calls):
        kind, t = call["kind"], call["trial"]
        left = left_behind(call)
        if left:
            left.checks = {**checks, **left.checks}
            return left
        if kind.startswith("replay"):
            continue
        if call.get("error"):
            f = error_status(call["error"], call)
            f.checks = {**checks, **f.checks, "error": call["error"], "call": f"{kind} {t}"}
            return f
        if call.get("denials"):
            return Finding("forbidden", _denial_reason(call["denials"]), {**checks, "denials": call["denials"]})
        ops = compute_ops(call, moves)
        if ops:
            why = " (the problem's work is moving values: its reference computes nothing)" \
                if moves and not compute_ops(call) else ""
            return Finding("not_triton", f"ATen compute ran inside forward: {', '.join(ops[:5])}{why}", checks)
        if call.get("launches", 0) == 0:
            why = "none of its own Triton kernels launched during forward"
            if call.get("foreign"):
                why += f" (only foreign kernels: {', '.join(call['foreign'][:3])})"
            return Finding("not_triton", why, checks)
        if call.get("out_of_bounds"):
            # what compute-sanitizer would report on a GPU; forward "raised" in effect
            return Finding("runtime_error", f"out-of-bounds store: {call['out_of_bounds'][0]}",
                           {**checks, "out_of_bounds": call["out_of_bounds"], "call": f"{kind} {t}"})
        changed = inputs_changed(call)
        if changed:
            return Finding("mutates_input", changed, checks)
        if call.get("aliases"):
            return Finding("aliases_input", call["aliases"][0], checks)
        bad = stream.compared[n]
        if isinstance(bad, Exception):
            raise bad
        if bad:
            bad = Finding(bad.status, bad.reason, {**checks, **bad.checks, "call": f"{kind} {t}"})
            return bad
        per_trial.append({"trial": t, "kind": kind, "launches": call["launches"], "kernels": call.get("kernels")})
        first.setdefault(t, call)
    bad = stream.follows(sorted(t for t in first if t < len(trials)))
    if bad:
        bad.checks = {**checks, **bad.checks}
        return bad
    checks["launches_per_call"] = min((p["launches"] for p in per_trial), default=0)
    return Finding(None, "", checks)


def judge_replay(rep: protocol.ReplayReply, secret: protocol.Trial, other: protocol.Trial, own: protocol.CallReport | None,
                 device: str, poisoned: list[str], checks: dict[str, Any]) -> Finding:
    """A replayer's runs of the traced call (replayer.py): on the secret trial (`secret`: the
    reference's outputs there) it must give the reference's outputs; on the worker's `other` trial
    the same as that trial's own call (`own`: determinism); with the candidate's launches left out,
    wrong outputs. `poisoned` names the kept tensors that reached it poisoned (statecheck.py)."""
    checks = dict(checks)
    why = "its own kernels, replayed without its Python on a trial its process never saw,"
    hyg = hygiene(rep)
    if hyg is not None:
        hyg.reason = f"{hyg.reason} (while its kernels were replayed)"
        hyg.checks = {**checks, **hyg.checks}
        return hyg
    if rep.get("error"):
        return Finding("not_triton", f"{why} could not run: {rep['error']}"[:1000], checks)
    runs: dict[Any, protocol.ReplayRun] = {r.get("name"): r for r in rep.get("runs") or [] if isinstance(r, dict)}
    for r in runs.values():
        if r.get("denials"):
            return Finding("forbidden", _denial_reason(r["denials"]), {**checks, "denials": r["denials"]})
        left = left_behind(r)
        if left:
            left.checks = {**checks, **left.checks}
            return left
        if r.get("blocked"):
            return Finding("not_triton", f"ATen compute ran while its kernels were replayed: {', '.join(sorted(r['blocked']))}",
                           checks)
    rs, ro, ra = runs.get("secret"), runs.get("other"), runs.get("ablate")
    if rs is None or ro is None or ra is None:
        return Finding("not_triton", f"{why} did not all run", checks)
    for r in (rs, ro):
        if r.get("error"):
            status = "crash" if r.get("cuda_fault") else "not_triton"
            return Finding(status, f"{why} failed: {r['error']}"[:1000], checks)
    # The replayer's own findings: the worker's report of the same checks is a claim its candidate can forge.
    for r in (rs, ro):
        if r.get("out_of_bounds"):
            return Finding("runtime_error", f"out-of-bounds store while its kernels were replayed: {r['out_of_bounds'][0]}",
                           {**checks, "out_of_bounds": r["out_of_bounds"], "call": f"replay {r.get('name')}"})
        if r.get("inputs_changed"):
            return Finding("mutates_input", f"input {r['inputs_changed'][0]} changed while its kernels were replayed",
                           checks)
        if r.get("aliases"):
            return Finding("aliases_input", f"{r['aliases'][0]} (in the replayed record)", checks)
    state = f"; the tensor(s) it kept from before forward that are not its parameters ({', '.join(poisoned[:3])}) " \
        "were replaced by NaN: cached or precomputed values are not the kernels' work" if poisoned else ""
    bad = _compared(rs, secret, own, device)
    if bad:
        return Finding("not_triton", f"{why} give wrong outputs ({bad.reason}){state}: the answer was not computed "
                       "by its Triton kernels from the inputs"[:1000],
                       {**checks, "kernel_replay": bad.checks, "replay_poisoned": poisoned})
    det = _compared(ro, secret, own, device)
    if det:
        return Finding(det.status, det.reason, {**checks, **det.checks})
    checks["determinism"] = "identical within rounding"
    checks["kernel_replay"] = "its kernels compute the outputs from inputs its process never saw"
    still = ra.get("error") is None and _compared(ra, secret, own, device) is None
    checks["ablation"] = "outputs still correct" if still else "outputs depend on its kernels"
    if still:
        return Finding("not_triton", "outputs are still correct with the candidate's own kernels left out of the "
                       "replay: the kernels are decoys", checks)
    return Finding(None, "", checks)


def replay_compare(r: protocol.ReplayRun, secret: protocol.Trial, own: protocol.CallReport | None,
                   device: str) -> Finding | Exception | None:
    """One replay run compared as judge_replay compares it: the secret and the ablated runs with the
    reference's outputs on the secret trial (`secret`), the other run with the worker's own call on that
    trial (`own`, determinism). An exception it raised (a malformed run) is returned, for the judge to raise.
    The job compares each run as it arrives (callstream.take_run), keeps this under RUN_COMPARED and
    drops the outputs, where what it found cannot change once the bounds are widened (job.py's near miss)."""
    try:
        if r.get("name") in ("secret", "ablate"):
            r.setdefault("sequence", secret["sequence"])
            return compare_outputs(r, secret, device) if r.get("outputs") is not None else \
                Finding("wrong_output", "no outputs")
        if r.get("name") == "other" and own is not None and own.get("outputs"):
            for i, (a, b) in enumerate(zip(own["outputs"], r.get("outputs") or [])):
                ok, info = tolerance.compare(b["data"], a["data"], det=True, tol=bound_of(secret, i)) \
                    if a["data"].shape == b["data"].shape else (False, {"error": "shapes differ"})
                if not ok:
                    return Finding("nondeterministic", f"same inputs twice (a call and its replay): output {i} "
                                   f"differs beyond rounding (norm rel diff {info.get('norm_rel_err', float('nan')):.3g})",
                                   {"determinism": info})
    except Exception as exc:  # noqa: BLE001 - raised where the judge reads it (replaycheck.decide places it)
        return exc
    return None


RUN_COMPARED = "compared_by_parent"  # a run's comparison, set by the parent only (callstream.take_run)


def _compared(r: protocol.ReplayRun, secret: protocol.Trial, own: protocol.CallReport | None, device: str) -> Finding | None:
    got = r[RUN_COMPARED] if RUN_COMPARED in r else replay_compare(r, secret, own, device)  # type: ignore[literal-required]
    if isinstance(got, Exception):
        raise got
    return got


def judge_timing(rep: protocol.TimeReply | protocol.TimeReplayReply, sets: list[protocol.Trial], device: str, min_launches: int,
                 n_calls: int, floor_ms: float) -> tuple[Finding, dict[str, Any]]:
    from distill.verifier.timing import Samples

    if isinstance(rep.get("error"), str):  # a replayer that could not rebuild the record it had just replayed
        return Finding("timing_invalid", f"the timing replay did not start: {rep['error'][:300]}"), {}
    if rep.get("error"):
        return error_status(rep["error"], rep), {}
    if rep.get("denials"):
        return Finding("forbidden", _denial_reason(rep["denials"])), {}
    ops = compute_ops(rep)
    if ops:
        return Finding("not_triton", f"ATen compute ran while timed: {', '.join(ops[:5])}"), {}
    samples = Samples(list(rep.get("times_ms") or []), window=str(rep.get("window") or "device"))
    kernel_ms = samples.median_ms
    synced = list(rep.get("synced_ms") or [])
    info: dict[str, Any] = {"kernel_ms": kernel_ms, "floor_ms": floor_ms, "samples": len(samples.times_ms),
                            "launches": rep.get("launches"), "expected_launches": min_launches * n_calls,
                            "window": samples.window, "fallback": rep.get("fallback") or None,
                            "synced_ms": statistics.median(synced) if synced else None,
                            "pad_ms": rep.get("pad_ms"), "host_ms": rep.get("host_ms"),
                            "retried_unstable": bool(rep.get("retried")), "late_trials": rep.get("late")}
    if (rep.get("launches") or 0) < min_launches * n_calls:
        return Finding("timing_invalid", f"{rep.get('launches')} own kernel launches while timed, expected "
                       f"{min_launches * n_calls}: results were replayed, not computed"), info
    for idx, chk in (rep.get("checked") or {}).items():
        if chk.get("problem") or chk.get("outputs") is None:
            return Finding("wrong_output", f"timed call {idx}: {chk.get('problem') or 'no output'}"), info
        call = {"outputs": [{"dtype": str(t.dtype).replace("torch.", ""), "device": device, "shape": list(t.shape),
                             "data": t} for t in chk["outputs"]], "sequence": sets[chk["set"]]["sequence"]}
        bad = compare_outputs(call, sets[chk["set"]], device)
        if bad:
            return Finding("wrong_output", f"timed call {idx}: {bad.reason}"), info
    if samples.unstable():
        return Finding("timing_invalid", "timing unstable: the two halves of the run disagree by over 50%"), info
    if kernel_ms < 0.9 * floor_ms:
        return Finding("timing_invalid", f"{kernel_ms:.4f} ms is below the physical floor {floor_ms:.4f} ms "
                       "(bytes / measured bandwidth, FLOPs / measured peak)"), info
    return Finding(None), info
