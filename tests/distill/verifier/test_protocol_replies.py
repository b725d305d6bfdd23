"""Every message a real verification's processes send is the TypedDict protocol.py declares for it
(wirecheck.py's checker, which the parent also runs on every sandboxed child's message; here on the
reference's too, and counting the kinds seen).

The parent's side of every pipe is wrapped (procs.Proc.receive checks each message it decodes against
what the command `Proc.serving` names may send): a key the message's type does not declare, a required
key it lacks, or a value of the wrong kind (a TypedDict nested in it included) fails the test. Which
messages may answer which command is wirecheck.EXPECT, read off the serving loops (worker._serve,
reference.reference_main). The CPU lane sends every message but the timing's; `-m gpu` adds those.
"""
from __future__ import annotations

from typing import Any

import pytest

from distill.verifier import ProblemError, VerifierPool, procs, protocol, reference
from distill.verifier.wirecheck import EXPECT, kinds_for, matches, problems
from tests.distill.verifier.conftest import honest, hostile, problem
from tests.limits import CALL_LIMIT_S


class Wiretap:
    """Checks every message the parent decodes from a child against its type (EXPECT)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: dict[str, int] = {}
        self.wrong: list[str] = []
        real_init, real_receive = procs.Proc.__init__, procs.Proc.receive
        tap = self

        def init(proc: procs.Proc, target: Any, cfg: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            proc._tap_ready = (protocol.RefReady,) if target is reference.reference_main else (protocol.SandboxReady,)
            real_init(proc, target, cfg, *args, **kwargs)

        def receive(proc: procs.Proc, seconds: float, phase: str) -> dict[str, Any]:
            msg = real_receive(proc, seconds, phase)
            tap.check(proc, msg)
            return msg

        monkeypatch.setattr(procs.Proc, "__init__", init)
        monkeypatch.setattr(procs.Proc, "receive", receive)

    def check(self, proc: procs.Proc, msg: dict[str, Any]) -> None:
        cmd = proc.serving  # the command its messages answer (procs.Proc.send), None while it starts
        if cmd is not None and cmd not in EXPECT:
            self.wrong.append(f"{cmd}: a reply to a command EXPECT does not list")
            return
        kinds = kinds_for(cmd, msg, getattr(proc, "_tap_ready", (protocol.SandboxReady, protocol.RefReady)))
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


def test_a_sandboxed_childs_message_of_the_wrong_kind_is_its_breach_not_the_parents_error(monkeypatch):
    """The parent checks every worker and replayer message as it decodes it (wirecheck.py): a count sent as a
    string, or a key the parent reads left out, is `forbidden` for that candidate; the next job on the same
    pool passes. Before, such a reply raised inside the parent's job (TypeError, KeyError)."""
    real = procs.codec.decode
    tamper = {"on": True}

    def decode(data: bytes, arena: Any = None) -> Any:
        msg = real(data, arena)
        if tamper["on"] and isinstance(msg, dict) and isinstance(msg.get("hygiene"), dict):
            msg["hygiene"]["threads"] = "3"
        return msg

    monkeypatch.setattr(procs.codec, "decode", decode)
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048, resized="off") as pool:
        bad = pool.verify(problem("add"), honest("add"))
        tamper["on"] = False
        good = pool.verify(problem("add"), honest("add"))
    assert bad.status == "forbidden", bad.reason
    assert "hygiene.threads: a str, not a int" in bad.reason, bad.reason
    assert good.status == "pass", good.reason


def test_the_checker_refuses_a_message_for_a_command_no_child_serves():
    from distill.verifier import wirecheck

    assert wirecheck.breach("shell", {"nonce": "n"}) == "a message while serving 'shell', which no child serves"
    assert wirecheck.breach(None, {"ready": True}) is not None  # a start-up message lacking the rest
    assert wirecheck.breach("end", {"nonce": "n", "progress": "p"}) == "a message before the reply to 'end', which sends none"
    assert wirecheck.breach("load", {"nonce": "n", "progress": "p"}) is None
