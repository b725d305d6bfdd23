"""Each message a sandboxed child sends, checked against its protocol.py type as the parent decodes it.

A worker runs the candidate, and a replayer runs its kernels: whatever either sends is a claim, and its
shape is a claim too. Unchecked, a reply with a string where a count belongs, or without a key the
parent reads, raised inside the parent's job (a TypeError or KeyError, not a verdict), and under
`verify_many` that ended every other pair of the batch with it. Checked here, a message that is not
what its command may send is a protocol breach (`procs.ProcProtocol`, judged `forbidden` by job.py),
the candidate's alone.

Keeps: the TypedDicts' keys (undeclared, required and missing) and the kinds of plain values, looked
into lists, dicts, unions and nested TypedDicts; which messages may answer which command (`EXPECT`,
read off the serving loops: worker._serve, reference.reference_main). Simplifies: a tensor is `Any`
(protocol.py imports no torch); the codec already refused anything but plain data. A reference
process never runs a candidate, so its messages are not checked at run time (the tests check them).
"""
from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

from distill.verifier import protocol

# command -> (what may come before its reply, what may reply). Any worker's or replayer's reply may be its
# loop's ErrorReply instead; any reference reply a ProblemErrorReply.
EXPECT: dict[str, tuple[tuple[type, ...], tuple[type, ...]]] = {
    "plan": ((), (protocol.PlanReply, protocol.ProblemErrorReply)),
    "trials": ((protocol.TrialSent,), (protocol.TrialsReply, protocol.ProblemErrorReply)),
    "trial_bounds": ((), (protocol.TrialBoundsReply, protocol.ProblemErrorReply)),
    "prepare_timing": ((), (protocol.PrepareTimingReply, protocol.ProblemErrorReply)),
    "measure": ((), (protocol.MeasureReply, protocol.ProblemErrorReply)),
    "peaks": ((), (protocol.PeaksReply, protocol.ProblemErrorReply)),
    "load": ((protocol.Progress,), (protocol.LoadReply, protocol.ErrorReply)),
    "run": ((protocol.Progress, protocol.CallSent), (protocol.RunReply, protocol.ErrorReply)),
    "time": ((), (protocol.TimeReply, protocol.ErrorReply)),
    "timed_outputs": ((), (protocol.TimedOutputsReply, protocol.ErrorReply)),
    "end": ((), (protocol.EndReply, protocol.ErrorReply)),
    "replay": ((protocol.Progress, protocol.RunSent), (protocol.ReplayReply, protocol.ErrorReply)),
    "time_replay": ((protocol.Progress,), (protocol.TimeReplayReply, protocol.ErrorReply)),
}
# Sent while a command runs: the messages that follow still answer that command.
MID_COMMAND = ("ack", "go")


def problems(value: Any, tp: Any, where: str = "") -> list[str]:
    """How `value` differs from type `tp`: keys of a TypedDict (undeclared, required and missing), the
    kinds of plain values; lists, dicts and unions looked into. Empty when it matches."""
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where or tp.__name__}: a {type(value).__name__}, not a {tp.__name__}"]
        hints = _hints(tp)
        at = where or tp.__name__
        out = [f"{at}: key {k!r} is not declared by {tp.__name__}" for k in value if k not in hints]
        out += [f"{at}: required key {k!r} of {tp.__name__} is missing" for k in sorted(tp.__required_keys__)
                if k not in value]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{at}.{k}")
        return out
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        found = [problems(value, arm, where) for arm in get_args(tp)]
        return [] if any(not f for f in found) else min(found, key=len)
    if tp is Any:
        return []
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{where}: {value!r} is not one of {get_args(tp)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: a {type(value).__name__}, not a list"]
        return [p for i, v in enumerate(value) for p in problems(v, get_args(tp)[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: a {type(value).__name__}, not a dict"]
        return [p for k, v in value.items() for p in problems(v, get_args(tp)[1], f"{where}[{k!r}]")]
    if tp is type(None):
        return [] if value is None else [f"{where}: {type(value).__name__}, not None"]
    if tp is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [
            f"{where}: a {type(value).__name__}, not a float"]
    if tp in (int, str, bool):
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
        return [] if ok else [f"{where}: a {type(value).__name__}, not a {tp.__name__}"]
    return []


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(tp: type) -> dict[str, Any]:
    """A TypedDict's evaluated annotations, once a process (get_type_hints re-evaluates them every call)."""
    if tp not in _HINTS:
        _HINTS[tp] = typing.get_type_hints(tp)
    return _HINTS[tp]


def matches(msg: Any, kinds: tuple[type, ...]) -> tuple[type | None, list[str]]:
    """The first of `kinds` that `msg` is; else None and how it differs from each."""
    found: list[str] = []
    for kind in kinds:
        got = problems(msg, kind)
        if not got:
            return kind, []
        found += got
    return None, found


def kinds_for(cmd: str | None, msg: dict[str, Any], ready: tuple[type, ...]) -> tuple[type, ...]:
    """What `msg` may be while its process serves `cmd` (None: it is starting, and says it is `ready`)."""
    if cmd is None:
        return ready
    before, replies = EXPECT.get(cmd, ((), ()))
    return before if "progress" in msg or "trial" in msg else replies


def breach(cmd: str | None, msg: dict[str, Any]) -> str | None:
    """Why a sandboxed child's `msg` is not what serving `cmd` may send, or None when it is."""
    if cmd is not None and cmd not in EXPECT:
        return f"a message while serving {cmd!r}, which no child serves"
    kinds = kinds_for(cmd, msg, (protocol.SandboxReady,))
    if not kinds:
        return f"a message before the reply to {cmd!r}, which sends none"
    kind, wrong = matches(msg, kinds)
    return None if kind is not None else "; ".join(wrong[:3])
