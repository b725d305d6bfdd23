"""The parent's side of the replay: what a replayer gets, and what its answer decides.

After the worker's trials pass, the parent takes the record of the traced call from the worker's
report (record.serialise: a claim like everything else the worker says), cuts the kernels module out
of the candidate's source itself (kernelsrc.py), checks every tensor the record says existed before
forward against the reference's parameters (statecheck.py: accepted ones keep the worker's bytes,
the others are poisoned), and has a replayer (replayer.py, a process that never imported the
candidate's module) run the record three times: on the replay trial, whose seed only the reference
and the replayer know, with the second weights (statecheck.py: the state tensors that are layouts of
the parameters, mapped; the reference's outputs for that trial computed with them); on another of the
worker's trials (determinism against that trial's own call); on the replay trial with the
candidate's launches left out. judge.judge_replay decides.

So the worker produces no evidence the verdict rests on: a forged record either replays into the
reference's outputs for inputs the worker never saw, from the candidate's Triton kernels alone (which
is the candidate computing the answer with Triton), or fails.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from distill.verifier import codec, judge, kernelsrc, protocol, statecheck
from distill.verifier.record import scrub

_PLAIN = re.compile(r"[^A-Za-z0-9_ .,:;()'\-/<>=+\[\]]")
RUNS = [{"name": "secret", "inputs": "secret", "second": True}, {"name": "other", "inputs": "other"},
        {"name": "ablate", "inputs": "secret", "ablate": True, "second": True}]


def _traced(run: protocol.RunReply, trial: int) -> protocol.CallReport | None:
    for call in run.get("calls") or []:
        if isinstance(call, dict) and call.get("trial") == trial and isinstance(call.get("trace"), dict):
            return call
    return None


def _own_call(run: protocol.RunReply, trial: int) -> protocol.CallReport | None:
    return next((c for c in run.get("calls") or [] if isinstance(c, dict) and c.get("trial") == trial), None)


def _launched_steps(record: dict[str, Any]) -> list[list]:
    return [st for st in record.get("steps") or [] if type(st) is list and len(st) > 1 and st[0] == "launch"]


def _launched(record: dict[str, Any]) -> set[str]:
    return {st[1] for st in _launched_steps(record) if type(st[1]) is str}


def _reached(record: dict[str, Any]) -> dict[int, list[tuple[int, int]]]:
    """Per storage, the byte hulls (first to last byte) of the tensors the record's steps and outputs take
    of it. The worker serves forward's `torch.empty` with guard bands around it (bands.py), so a state
    storage a kernel filled holds bands that no tensor of it reaches: they are not its value. The walk
    reads the worker's words defensively: anything malformed is left out (the replayer refuses it)."""
    hulls: dict[int, list[tuple[int, int]]] = {}

    def add(r: Any, depth: int = 0) -> None:
        if depth > 6:
            return
        if type(r) in (list, tuple):
            for x in r:
                add(x, depth + 1)
        elif type(r) is dict and {"s", "off", "size", "stride", "dtype"} <= r.keys():
            size, stride, off, sid = r["size"], r["stride"], r["off"], r["s"]
            if (r["dtype"] in codec.DTYPES and type(sid) is int and type(off) is int and off >= 0
                    and type(size) is list and type(stride) is list and len(size) == len(stride)
                    and all(type(n) is int and n >= 0 for n in size) and all(type(x) is int and x >= 0 for x in stride)):
                if all(size):
                    width = codec.DTYPES[r["dtype"]][1]
                    hulls.setdefault(sid, []).append((off, off + width * (1 + sum((n - 1) * x for n, x in zip(size, stride)))))
        elif type(r) is dict:
            for x in r.values():
                add(x, depth + 1)

    add(record.get("steps"))
    add(record.get("outputs"))
    return hulls


def _taken_bytes(s: dict[str, Any], hulls: list[tuple[int, int]] | None) -> tuple[dict[str, Any], torch.Tensor | None]:
    """What `classify` and `remap` judge of one state storage, its bytes within the tensors' hulls, and
    which bytes those are (None: the whole storage, where the hulls are unknown or cut a value)."""
    data = s.get("data")
    if not hulls or type(data) is not torch.Tensor or s.get("dtype") not in codec.DTYPES:
        return s, None
    keep = torch.zeros(data.numel(), dtype=torch.bool)
    for a, b in hulls:
        keep[max(a, 0):max(min(b, data.numel()), 0)] = True
    if bool(keep.all()) or int(keep.sum()) % codec.DTYPES[s["dtype"]][1]:
        return s, None
    return {**s, "data": data[keep]}, keep


def _whole(part: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """`part` (the bytes `_taken_bytes` kept) back in its storage, every other byte 0xFF (no value;
    the replay's band check reads these)."""
    if keep is None:
        return part
    whole = torch.full(keep.shape, 0xFF, dtype=torch.uint8)
    whole[keep] = part
    return whole


def _state(record: dict[str, Any], params: dict[str, Any], limit: int, literals: frozenset[float],
           tables: frozenset[tuple[float, ...]] = frozenset(), sizes: frozenset[int] = frozenset()) -> tuple[
        list[dict[str, Any]], list[str], list[str]]:
    """The record's storages as the replayer gets them, what each state one was taken as, and the
    poisoned ones named for a reason (its first layout: dtype and bytes). Past `limit` bytes of
    claimed state the rest is poisoned unread: the parent never spends more on a worker's claims."""
    storages, kinds, poisoned = [], [], []
    claims: set[tuple[str, int]] = set()
    fills = size_tables = 0
    reached = _reached(record)
    for sid, s in enumerate(record["storages"]):
        if not isinstance(s, dict) or s.get("kind") != "state":
            storages.append(s)
            continue
        limit -= s["data"].numel() if type(s.get("data")) is torch.Tensor else 0  # the bytes sent, not the claim
        judged, keep = _taken_bytes(s, reached.get(sid))
        s = {**s, "data": _whole(judged["data"], keep)}
        taken = statecheck.classify(judged, params or {}, literals, tables, sizes) if limit >= 0 else ""
        if taken == "sizes":  # a few tables of sizes, never a store of them
            size_tables += 1
            taken = taken if size_tables <= statecheck.SIZE_TABLES else ""
        if taken == "constant":  # fills together: past CONSTANT_CLAIMS values they are a table
            value = statecheck.claim(judged, literals)
            if value is not None and value not in claims:
                claims.add(value)
                taken = taken if len(claims) <= statecheck.CONSTANT_CLAIMS else ""
            # and which of many small fills holds 0 or 1 is a bit each: past CONSTANT_STORAGES, none is free
            fills += 1
            taken = taken if fills <= statecheck.CONSTANT_STORAGES else ""
        kinds.append(taken or "poisoned")
        second = statecheck.remap(judged, params or {}, tables) if taken == "parameters" else None
        if second is not None:  # the replay trial's runs place the second weights (statecheck.py)
            storages.append({**s, "second": _whole(second, keep)})
        elif taken:
            storages.append(s)
        else:
            storages.append({k: v for k, v in s.items() if k != "data"} | {"kind": "poison"})
            dtype = s.get("dtype") if s.get("dtype") in codec.DTYPES else "?"  # the worker's words: known ones only
            poisoned.append(f"a {dtype} tensor of {s['data'].numel() if type(s.get('data')) is torch.Tensor else 0} bytes")
    return storages, kinds, poisoned


_CLOSURE_TAGS = frozenset({"constexpr", "value", "dtype", "kernel"})
_DTYPES = frozenset({"int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "fp8e4nv",
                     "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"})


def _instances(record: dict[str, Any], source: kernelsrc.KernelSource) -> tuple[dict[str, Any], list[dict]]:
    """The record's launches named as the kernels module names their kernels: a nested kernel by its
    name there (kernelsrc.hoisted), a kernel made by a factory once per set of values it closed over
    (an instance the replayer binds); ValueError when the record's closures do not fit the source.
    The values are the worker's claims: typed data the replayer binds, never text; a claim that is
    wrong only changes what the replay runs."""
    named: dict[str, str] = {}
    instances: list[dict] = []
    steps = []
    for st in record["steps"]:
        if not (type(st) is list and len(st) > 1 and st[0] == "launch" and type(st[1]) is str):
            steps.append(st)
            continue
        name = source.hoisted.get(st[1], st[1])
        want = source.closures.get(name)
        got = st[5] if len(st) == 6 else None
        if want is None and got is None:
            steps.append([st[0], name, *st[2:]])
            continue
        if want is None or type(got) is not dict or sorted(got) != want:
            raise ValueError(f"kernel {scrub(name)}'s launch records closed-over names that are not its own")
        values = {n: _closure_value(got[n], source) for n in want}
        key = repr((name, sorted(values.items(), key=lambda kv: kv[0])))
        if key not in named:
            named[key] = f"{name}__closure{len(instances)}"
            instances.append({"name": named[key], "kernel": name, "globals": values})
        steps.append([st[0], named[key], *st[2:5]])
    return {**record, "steps": steps}, instances


def _closure_value(v: Any, source: kernelsrc.KernelSource) -> list:
    if type(v) is not list or len(v) != 2 or v[0] not in _CLOSURE_TAGS:
        raise ValueError("a closed-over value is malformed")
    tag, x = v
    if tag in ("constexpr", "value") and (type(x) in (int, bool, type(None)) or (type(x) is float and x == x)
                                          or (type(x) is str and len(x) <= 200)):
        return [tag, x]
    if tag == "dtype" and x in _DTYPES:
        return [tag, x]
    if tag == "kernel" and type(x) is str:
        name = source.hoisted.get(x, x)
        if name in source.kernels and name not in source.closures:
            return [tag, name]
        raise ValueError(f"a closed-over jit function {scrub(x)} is not rebuilt from the module's source")
    raise ValueError("a closed-over value is malformed")


@dataclass
class Prepared:
    """The replayer's command, or the finding that makes it needless; what the state check took."""
    msg: dict[str, Any] | None = None
    finding: judge.Finding | None = None
    poisoned: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # kernelsrc: names left out of the kernels module

    @property
    def launches(self) -> int:
        """Launches in one run of the record."""
        return len(_launched_steps(self.msg["trace"])) if self.msg else 0


def prepare(candidate: str, problem: str, run: protocol.RunReply, traced: int, params: dict[str, Any],
            seeds: dict[str, int], byte_limit: int, checks: dict[str, Any], stream: bool = False) -> Prepared:
    """The `replay` command for the record of trial `traced` in the worker's `run` report; `seeds`:
    the secret trial's and the other trial's; `stream`: the job's input sets are made per call."""
    call = _traced(run, traced)
    if call is None:
        return Prepared(finding=judge.Finding("not_triton", "no call could be replayed: the traced trial sent no "
                                              "record of its launches", checks))
    record = call["trace"]
    why = "its kernels could not be replayed without its Python: not replayable: "
    if record.get("error"):  # the worker's words: only plain text reaches a verdict
        return Prepared(finding=judge.Finding("not_triton", why + _PLAIN.sub("?", str(record["error"]))[:300], checks))
    if type(record.get("storages")) is not list or type(record.get("steps")) is not list:
        return Prepared(finding=judge.Finding("not_triton", f"{why}malformed record", checks))
    source = kernelsrc.extract(candidate)
    try:
        record, instances = _instances(record, source)
    except ValueError as exc:
        return Prepared(finding=judge.Finding("not_triton", f"{why}{exc}"[:1000], checks))
    missing = sorted(_launched(record) - set(source.kernels) - {i["name"] for i in instances})
    if source.error or missing:
        name = scrub(missing[0])  # a name the worker sent: an identifier or nothing
        what = source.error or f"kernel {name} is not rebuilt from the module's source: {source.why_missing(name)}"
        return Prepared(finding=judge.Finding("not_triton", f"{why}{what}"[:1000], checks))
    prints = run.get("fingerprints")
    sizes = statecheck.input_sizes(prints[traced] if type(prints) is list and 0 <= traced < len(prints) else None)
    storages, kinds, poisoned = _state(record, params, byte_limit, statecheck.literals(candidate),
                                       statecheck.sequences(candidate), sizes)
    msg = protocol.Replay(cmd="replay", problem=problem, kernels=source.text,
                          kernel_names=source.kernels + [i["name"] for i in instances], instances=instances,
                          trace={**record, "storages": storages, "scalar_inputs": _scalar_inputs(run, traced)},
                          byte_limit=byte_limit, runs=list(RUNS), seeds=seeds,
                          stream=stream)
    checks = {**checks, "replay_state": kinds} if kinds else checks
    off = _PLAIN.sub("?", str((params or {}).get("second_off") or ""))[:200]
    weights = ("second" + (f" ({off})" if off else "")) if (params or {}).get("second") else f"first: {off or '?'}"
    return Prepared(msg=msg, poisoned=poisoned, skipped=source.skipped, checks={**checks, "replay_weights": weights})


def _scalar_inputs(run: protocol.RunReply, traced: int) -> list[list[Any]]:
    """The traced trial's float inputs that are not tensors, as [position, value], read from the inputs'
    fingerprints (problemio.fingerprint: a number's repr), which judge_calls found equal to the
    reference's. The replay puts each trial's own number where the record carries the traced one
    (replay.Program.substitutes): `get_inputs` returning `[x, float(torch.rand(()))]` changes it with
    the seed, and an honest kernel taking it as a launch argument was `not_triton` on the replay trial."""
    prints = run.get("fingerprints")
    if type(prints) is not list or not 0 <= traced < len(prints) or type(prints[traced]) is not list:
        return []
    out: list[list[Any]] = []
    for i, p in enumerate(prints[traced][:64]):
        if type(p) is str and len(p) < 64 and not p.startswith("torch."):
            try:
                v = ast.literal_eval(p)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if type(v) is float and math.isfinite(v):
                out.append([i, v])
    return out


def decide(rep: protocol.ReplayReply, prep: Prepared, trials: list[protocol.Trial], secret: int, other: int,
           run: protocol.RunReply, device: str) -> judge.Finding:
    """The replayer's report judged (judge.judge_replay), after the inputs it made are checked."""
    same_inputs(rep, trials, {"secret": secret, "other": other})
    short = rep.get("problem_memory") or next((r.get("out_of_memory") for r in rep.get("runs") or []
                                              if isinstance(r, dict) and r.get("out_of_memory")), None)
    if short:  # the replayer holds the inputs beside the record's buffers: a limit of the verifier's own,
        # retried with the GPU alone where the job shares it (pool.py)
        from distill.verifier.problemio import ResourceError

        raise ResourceError(f"too large for this verifier's replay: {_PLAIN.sub('?', str(short))[:300]}",
                            step="replay", resource="device")
    try:
        found = judge.judge_replay(rep, trials[secret], trials[other], _own_call(run, other), device, prep.poisoned,
                                   prep.checks)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError):  # its kernels ran in that process
        return judge.Finding("forbidden", "at run time: the replay's report is malformed (its kernels ran in the "
                             "replayer)", prep.checks)
    if found.status == "not_triton" and (" failed: " in found.reason or "could not run" in found.reason):
        # A kernel that needs a name the kernels module left out: say which, and why it was left out.
        for name, why in prep.skipped.items():
            if re.search(rf"\b{re.escape(name)}\b", found.reason):
                found.reason = (f"{found.reason} (not replayable: {name} is not in the kernels module the replay "
                                f"rebuilds from the source: {why})")[:1000]
                break
    return found


def same_inputs(rep: protocol.ReplayReply | protocol.TimeReplayReply, trials: list[protocol.Trial],
                index: dict[str, int]) -> None:
    """The replayer made its input sets (by name; `index`: the reference's trial of each) from the
    same seeds as the reference, both trusted: a problem whose `get_inputs` ignores the seed is the
    problem's fault, as in judge_calls."""
    prints = rep.get("fingerprints") or {}
    for name, i in index.items():
        if name in prints and prints[name] != trials[i]["fingerprint"]:
            from distill.verifier.problemio import ReferenceFailed

            raise ReferenceFailed("get_inputs() made different inputs from the same seed in the reference and the "
                               "replayer: inputs must come from torch/random/numpy RNGs seeded by the harness")
