"""Every message a real verification's processes send is the TypedDict protocol.py declares for it.

The parent's side of every pipe is wrapped (procs.Proc.send notes the command a process is serving,
procs.Proc.receive checks each message it decodes): a key the message's type does not declare, a
required key it lacks, or a value of the wrong kind (a TypedDict nested in it included) fails the test.
Which messages may answer which command is `EXPECT` below, read off the serving loops (worker._serve,
reference.reference_main). The CPU lane sends every message but the timing's; `-m gpu` adds those.
"""
from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

import pytest

from distill.verifier import ProblemError, VerifierPool, procs, protocol, reference
from tests.distill.verifier.conftest import honest, hostile, problem
from tests.limits import CALL_LIMIT_S

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
_MID_COMMAND = ("ack", "go")  # sent while a command runs: its messages still answer that command


def problems(value: Any, tp: Any, where: str = "") -> list[str]:
    """How `value` differs from type `tp`: keys of a TypedDict (undeclared, required and missing), the
    kinds of plain values; lists, dicts and unions looked into. Empty when it matches."""
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where or tp.__name__}: a {type(value).__name__}, not a {tp.__name__}"]
        hints = typing.get_type_hints(tp)
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


def matches(msg: Any, kinds: tuple[type, ...]) -> tuple[type | None, list[str]]:
    """The first of `kinds` that `msg` is; else None and how it differs from each."""
    found = []
    for kind in kinds:
        got = problems(msg, kind)
        if not got:
            return kind, []
        found += got
    return None, found


class Wiretap:
    """Checks every message the parent decodes from a child against its type (EXPECT)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: dict[str, int] = {}
        self.wrong: list[str] = []
        real_init, real_send, real_receive = procs.Proc.__init__, procs.Proc.send, procs.Proc.receive
        tap = self

        def init(proc: procs.Proc, target: Any, cfg: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            proc._tap_ready = (protocol.RefReady,) if target is reference.reference_main else (protocol.SandboxReady,)
            proc._tap_cmd = None
            real_init(proc, target, cfg, *args, **kwargs)

        def send(proc: procs.Proc, msg: dict[str, Any]) -> None:
            if msg.get("cmd") not in _MID_COMMAND:
                proc._tap_cmd = msg.get("cmd")
            real_send(proc, msg)

        def receive(proc: procs.Proc, seconds: float, phase: str) -> dict[str, Any]:
            msg = real_receive(proc, seconds, phase)
            tap.check(proc, msg)
            return msg

        monkeypatch.setattr(procs.Proc, "__init__", init)
        monkeypatch.setattr(procs.Proc, "send", send)
        monkeypatch.setattr(procs.Proc, "receive", receive)

    def check(self, proc: procs.Proc, msg: dict[str, Any]) -> None:
        cmd = getattr(proc, "_tap_cmd", None)
        if cmd is None:
            kinds = getattr(proc, "_tap_ready", (protocol.SandboxReady, protocol.RefReady))
        elif cmd not in EXPECT:
            self.wrong.append(f"{cmd}: a reply to a command EXPECT does not list")
            return
        else:
            before, replies = EXPECT[cmd]
            interim = "progress" in msg or "trial" in msg
            kinds = before if interim else replies
        kind, wrong = matches(msg, kinds)
        if kind is None:
            self.wrong.append(f"{cmd or 'start-up'}: {'; '.join(wrong[:8])}")
        else:
            self.seen[kind.__name__] = self.seen.get(kind.__name__, 0) + 1


def test_the_checker_finds_an_undeclared_key_a_missing_one_and_a_wrong_kind():
    hyg = {"denials": [], "patched": [], "state": [], "disk_bytes": 0, "threads": 0, "blocked": {}}
    good = {"nonce": "n", "hygiene": hyg, "ok": True}
    assert problems(good, protocol.LoadReply) == []
    assert problems({**good, "extra": 1}, protocol.LoadReply) == ["LoadReply: key 'extra' is not declared by LoadReply"]
    assert problems({"nonce": "n", "ok": True}, protocol.LoadReply) == [
        "LoadReply: required key 'hygiene' of LoadReply is missing"]
    assert problems({**good, "hygiene": {**hyg, "threads": "3"}}, protocol.LoadReply) == [
        "LoadReply.hygiene.threads: a str, not a int"]
    assert problems({**good, "error": {"type": "x"}}, protocol.LoadReply) == [
        "LoadReply.error: required key 'message' of Failure is missing"]
    call = {"progress": "p", "nonce": "n", "ack": True, "call": {"kind": "trial"}}
    kind, wrong = matches(call, EXPECT["run"][0])
    assert kind is None and "CallSent.call: required key 'trial' of CallReport is missing" in wrong


# (problem, candidate, its status): together they send every message of the CPU lane
CASES = [
    ("add", honest("add"), "pass"),                            # load, run, replay, end; plan, trials
    ("add", hostile("import_error"), "compile_error"),         # a LoadReply with its error
    ("add", hostile("init_error"), "compile_error"),           # a RunReply that ends at construction
    ("add", hostile("store_past_end"), "runtime_error"),       # a call's report with its findings
    ("add", hostile("decoy_kernel"), "not_triton"),            # the replay's ablation run
    ("small_term", hostile("drop_small_term"), "wrong_output"),  # a near miss: trial_bounds
]
IDS = ["honest", "import_error", "init_error", "store_past_end", "decoy_kernel", "drop_small_term"]
BROKEN = "import torch\nclass Model(torch.nn.Module):\n    pass\n"  # no get_inputs: a ProblemErrorReply


@pytest.fixture(scope="module")
def sent():
    """Every case verified once, and a broken problem, on a CPU pool whose every message is checked as the
    parent decodes it (its start-up's included): (each case's status, then the broken problem's error; the tap)."""
    with pytest.MonkeyPatch.context() as mp:
        tap = Wiretap(mp)
        with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048, resized="off") as pool:
            got: list[Any] = [pool.verify(problem(name), candidate) for name, candidate, _ in CASES]
            try:
                got.append(pool.verify(BROKEN, honest("add")))
            except ProblemError as exc:
                got.append(exc)
    return got, tap


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_each_case_got_its_status(sent, k):
    v = sent[0][k]
    assert v.status == CASES[k][2], v.reason


def test_every_message_was_its_declared_type(sent):
    tap = sent[1]
    assert isinstance(sent[0][-1], ProblemError)
    assert not tap.wrong, "\n".join(tap.wrong)


def test_every_kind_the_cpu_lane_sends_was_checked(sent):
    """All but the timing's (`-m gpu`), each at least once."""
    want = {"SandboxReady", "RefReady", "PlanReply", "TrialSent", "TrialsReply", "TrialBoundsReply", "Progress",
            "CallSent", "LoadReply", "RunReply", "RunSent", "ReplayReply", "EndReply", "ProblemErrorReply"}
    assert want <= set(sent[1].seen), sorted(want - set(sent[1].seen))


@pytest.mark.gpu
def test_the_timings_messages_are_their_declared_types(monkeypatch):
    """`-m gpu`: the worker's and the replayer's timing and the reference's medians and peaks."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tap = Wiretap(monkeypatch)
    with VerifierPool(workers=1, device="cuda", timeout=120, timing_trials=20, resized="off") as pool:
        assert pool.verify(problem("add"), honest("add")).status == "pass"
    with VerifierPool(workers=1, device="cuda", timeout=120, timing_trials=20, resized="off",
                      timing_in="worker") as pool:
        assert pool.verify(problem("add"), honest("add")).status == "pass"
    assert not tap.wrong, "\n".join(tap.wrong)
    want = {"PeaksReply", "PrepareTimingReply", "MeasureReply", "TimeReplayReply", "TimeReply", "TimedOutputsReply"}
    assert want <= set(tap.seen), sorted(want - set(tap.seen))
