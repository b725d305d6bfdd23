"""The worker's calls judged as they arrive: each call's outputs compared with the reference's at once,
and only what later checks read kept.

A worker sends each call's report the moment the call is done (sandbox/worker.py) and forgets its
outputs; the parent (`CallStream.add`) compares them with the reference's outputs for that trial
(compare.compare_outputs, the same function and bounds as before) and keeps:

* the call's report without its output values (dtype, device, shape of each output; its records,
  errors, launches, the traced call's record): what judge.judge_calls reads in DESIGN §4 order once
  the run's reply (hygiene, construction) is in;
* the comparison's finding;
* for the bound on input-independent answers (`follows_reference`), each output's values on a secret
  subset of at most 65,536 elements, in float64;
* the full outputs of two kinds of call only: the first call on the trial the replay's determinism
  run compares against (`keep_trial`, judge.judge_replay), and a call whose comparison failed (a near
  miss is compared again once each trial's own bound is measured, job.py; its values are then read
  again). Large ones go to the job's scratch files (spill.py), not the heap.

So the parent holds one call's outputs at a time, however many calls and trials a job has.

In step (`feed`, refwork.Feed: a job whose expected outputs would not stay in the parent's memory), the
reference's outputs for trial t are read as call t arrives, and once that call passed they are dropped
(spill.Spill.drop) after what later checks read of them is kept: their values on the bound's secret
subsets and, while every trial so far equalled the first, the first trial's outputs (the degenerate-
reference check). Only a near miss's trial stays (compared again with the widened bound). So a job's
disk need does not grow with its input sets (memplan.job_disk). Without a feed every trial's expected
outputs stay in the parent to the end (spilled as they arrive when large), as before.
"""
from __future__ import annotations

import secrets
from typing import Any

import torch

from distill.verifier import environ, protocol, tolerance
from distill.verifier.compare import Finding, compare_outputs
from distill.verifier.procs import ProcProtocol
from distill.verifier.spill import Spill

_SUBSET = 1 << 16


def _secret_subset(n: int) -> slice | torch.Tensor:
    if n <= _SUBSET:
        return slice(None)
    g = torch.Generator().manual_seed(secrets.randbits(63))
    return torch.randint(0, n, (_SUBSET,), generator=g)


def without_values(outputs: Any) -> Any:
    if not isinstance(outputs, list):
        return outputs
    return [{k: v for k, v in o.items() if k != "data"} if isinstance(o, dict) else o for o in outputs]


class CallStream:
    """The worker's calls of one run, judged one at a time against `trials` (the reference's)."""

    def __init__(self, trials: list[protocol.Trial], device: str, keep_trial: int | None = None,
                 spill: Spill | None = None, feed: Any = None, calls: int | None = None) -> None:
        self.trials, self.device, self.keep_trial, self.spill = trials, device, keep_trial, spill
        self.feed = feed  # refwork.Feed, read in step: `trials` is its list, growing as calls arrive
        self.count = len(trials) if calls is None else calls  # the trials a call may name
        self._refs: dict[int, dict[int, tuple[torch.dtype, torch.Size, torch.Tensor]]] = {}  # in step: subsets
        self._first: int | None = None  # in step: the first passing trial, kept while every later one equals it
        self._same = True
        self.calls: list[protocol.CallReport] = []  # each call's report, its outputs without `data` (unless kept)
        # Its comparison with the reference; an exception it raised (a malformed report) is raised where
        # the judge reads it, as when the comparison ran there.
        self.compared: list[Finding | Exception | None] = []
        self._failed: dict[int, protocol.CallReport] = {}  # index -> the call with its values, compared again later
        self._picks: dict[int, slice | torch.Tensor] = {}  # output -> its secret subset
        self._subsets: dict[int, dict[int, torch.Tensor]] = {}  # trial -> output -> its values there

    @classmethod
    def over(cls, calls: list[protocol.CallReport], trials: list[protocol.Trial], device: str) -> "CallStream":
        """A stream over calls already in hand (a report judged whole: the unit tests, a recorded run)."""
        stream = cls(trials, device)
        for call in calls:
            stream.add(call)
        return stream

    def add(self, call: protocol.CallReport) -> None:
        """Judge one call's report (its `trial` an index of `trials`, the caller checked) and keep what
        later checks read; its output values are dropped unless kept (above)."""
        n, t = len(self.calls), call.get("trial")
        if self.feed is not None:
            self.feed.upto(t + 1)
        outs = call.get("outputs")
        meta: protocol.CallReport = {k: v for k, v in call.items() if k != "outputs"}
        if "outputs" in call:
            meta["outputs"] = without_values(outs)
        replay = str(call.get("kind", "")).startswith("replay")  # judged by the replay, not here
        try:
            bad = None if replay else compare_outputs(call, self.trials[t], self.device)
        except Exception as exc:  # noqa: BLE001 - kept for the judge, which raises it in its turn
            bad = exc
        first = not replay and all(c.get("trial") != t or str(c.get("kind", "")).startswith("replay")
                                   for c in self.calls)
        if first:
            self.summarise(t, outs)
        near = isinstance(bad, Finding) and bool((bad.checks.get("compare") or {}).get("within_table"))
        again = bad is not None and (self.feed is None or near)  # compared again later (`rejudge`)
        if first and t == self.keep_trial or again:
            kept = self._keep(outs)
            if first and t == self.keep_trial:
                meta["outputs"] = kept
            if again:
                self._failed[n] = {**call, "outputs": kept}
        self.calls.append(meta)
        self.compared.append(bad)
        if self.feed is not None and first:
            self._consume(t, bad is None, near)
        self._release()  # the trial's expected outputs, read for this call, leave the resident set

    def seen(self, t: int) -> bool:
        """Whether a call on trial `t` was reported already (in step its expected outputs may be gone)."""
        return any(c.get("trial") == t for c in self.calls)

    def _consume(self, t: int, passed: bool, near: bool) -> None:
        """In step: keep what later checks read of trial t's expected outputs, and drop them."""
        outs = self.trials[t]["outputs"]
        if passed and outs is not None:
            got = self._refs.setdefault(t, {})
            for i, r in enumerate(outs):
                if type(r) is torch.Tensor and r.is_floating_point():
                    pick = self._picks.setdefault(i, _secret_subset(r.numel()))
                    got[i] = (r.dtype, r.shape, r.detach().reshape(-1)[pick].double().cpu())
            if self._first is None:
                self._first = t
                return
            if self._same:
                firsts = self.trials[self._first]["outputs"]
                self._same = len(firsts) == len(outs) and all(torch.equal(a, b) for a, b in zip(outs, firsts))
                if not self._same:
                    self._drop(self._first)
        if not near:
            self._drop(t)

    def _drop(self, t: int) -> None:
        outs, self.trials[t]["outputs"] = self.trials[t]["outputs"], None
        if self.spill is not None and outs is not None:
            self.spill.drop(outs)

    def _release(self) -> None:
        if self.spill is not None:
            self.spill.release()

    def _keep(self, outs: Any) -> Any:
        return outs if self.spill is None else self.spill.keep_outputs(outs)

    def summarise(self, t: int, outs: Any) -> None:
        """Keep each output's values on its secret subset, where it matches the reference's in dtype and
        shape (otherwise the comparison failed, and the bound is never asked)."""
        got: dict[int, torch.Tensor] = self._subsets.setdefault(t, {})
        refs = self.trials[t]["outputs"]
        for i, o in enumerate(outs if isinstance(outs, list) else []):
            data = o.get("data") if isinstance(o, dict) else None
            if i >= len(refs) or type(data) is not torch.Tensor or data.dtype != refs[i].dtype \
                    or data.shape != refs[i].shape or not data.is_floating_point():
                continue
            pick = self._picks.setdefault(i, _secret_subset(refs[i].numel()))
            got[i] = data.detach().reshape(-1)[pick].double().cpu()

    def rejudge(self, trials: list[protocol.Trial]) -> None:
        """Compare the failed calls again against `trials` (each trial's bound widened, judge.widened)."""
        self.trials = trials
        for n, call in self._failed.items():
            try:
                self.compared[n] = compare_outputs(call, trials[call["trial"]], self.device)
            except Exception as exc:  # noqa: BLE001 - as in `add`
                self.compared[n] = exc

    def follows(self, ts: list[int]) -> Finding | None:
        """`follows_reference` for the first calls on trials `ts` (all passed their comparisons)."""
        if len(ts) < 2:
            return None
        if self.feed is not None:  # the reference's subsets and the equality, kept as each call was judged
            n_out = 1 + max(self._refs.get(ts[0], {}), default=-1)
            return _follows(ts, n_out, lambda t, i: self._refs.get(t, {}).get(i), self._same, self._subset)
        first = self.trials[ts[0]]["outputs"]
        same = True
        for t in ts[1:]:
            same = all(torch.equal(self.trials[t]["outputs"][i], first[i]) for i in range(len(first)))
            self._release()
            if not same:
                break

        def ref(t: int, i: int) -> tuple[torch.dtype, torch.Size, torch.Tensor] | None:
            r = self.trials[t]["outputs"][i]
            if not r.is_floating_point():
                return None
            got = r.detach().reshape(-1)[self._picks.get(i, slice(None))].double().cpu()
            self._release()
            return r.dtype, r.shape, got

        return _follows(ts, len(first), ref, same, self._subset)

    def _subset(self, t: int, i: int) -> torch.Tensor | None:
        return self._subsets.get(t, {}).get(i)


def take_call(stream: CallStream, msg: protocol.CallSent | protocol.Progress) -> None:
    """One call's report, as the worker sent it when the call ended: judged now, its outputs dropped
    (above). A report that names no trial of the reference's is a tampered channel (the job's `run`, on_data)."""
    call: protocol.CallReport | None = msg.get("call")
    if call is None:
        return
    trial = call.get("trial") if isinstance(call, dict) else None
    if type(trial) is not int or not 0 <= trial < stream.count or type(call.get("kind")) is not str:
        raise ProcProtocol("a call's report names no trial of this job")
    if stream.feed is not None and stream.seen(trial):  # in step, its expected outputs may be gone
        raise ProcProtocol("a second report on one trial")
    stream.add(environ.scrub(call, keep=frozenset({"trace"})))


def follows_reference(calls: dict[int, protocol.CallReport], trials: list[protocol.Trial]) -> Finding | None:
    """A candidate must be closer to the reference than any input-independent answer could be (`calls`:
    trial -> the first call on it, with its output values)."""
    ts = sorted(t for t in calls if t < len(trials))
    stream = CallStream(trials, "cpu")
    for t in ts:
        stream.summarise(t, calls[t].get("outputs"))
    return stream.follows(ts)


def _follows(ts: list[int], n_out: int, ref: Any, same: bool, subset: Any) -> Finding | None:
    """Each trial passing its tolerance is not enough when the tolerance is wide next to how much the
    reference changes between input draws (a loss averaged over many elements, a near-constant
    statistic): a fixed tensor C placed between the draws passes every trial. By the triangle
    inequality any such C is at distance >= max ||R_t - R_u|| / 2 from some trial's reference, so a
    candidate whose worst error reaches that bound has shown no dependence on its inputs that a
    constant lacks, whatever it computed. Applied where the reference's trials differ by more than
    four times the dtype's determinism tolerance (`det_rel`, rounding-sized): an honest kernel's error
    is rounding-sized too, well under half of such a change. The bound holds on any subset of
    elements; a secret one (drawn per output as its first call arrived) keeps the cost flat at any size.
    `ref(t, i)`: trial t's output i as (dtype, shape, its values on the subset in float64), None where it
    is not floating-point; `same`: every trial's outputs equal the first's; `subset(t, i)`: the call's.
    """
    if same:
        from distill.verifier.problemio import ReferenceFailed

        raise ReferenceFailed("the reference returns the same outputs for every input draw, so any fixed answer "
                           "passes: the problem is degenerate")
    for i in range(n_out):
        got = [ref(t, i) for t in ts]
        if any(g is None for g in got):
            continue
        tol = tolerance.tolerance_for(got[0][0])
        if tol is None or any(g[1] != got[0][1] for g in got):
            continue
        refs64 = [g[2] for g in got]
        outs = [subset(t, i) for t in ts]
        finite = [torch.isfinite(r) for r in refs64]
        err = max(float(torch.linalg.vector_norm(torch.where(f, o - r, 0))) for o, r, f in zip(outs, refs64, finite))
        spread = max(float(torch.linalg.vector_norm(torch.where(fa & fb, a - b, 0)))
                     for k, (a, fa) in enumerate(zip(refs64, finite)) for b, fb in zip(refs64[k + 1:], finite[k + 1:]))
        scale = max(float(torch.linalg.vector_norm(torch.where(f, r, 0))) for r, f in zip(refs64, finite))
        if spread <= 4 * tol.det_rel * scale:
            continue     # the reference barely moves: nothing tells a fixed answer from a computation
        if err >= 0.5 * spread:
            return Finding("wrong_output", f"output {i} does not follow its inputs: its error ({err:.3g}) is as large as "
                           f"a fixed answer's would be (half the reference's change between trials, {spread / 2:.3g})",
                           {"follows_reference": {"output": i, "error": err, "half_spread": spread / 2}})
    return None
