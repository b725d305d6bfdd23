"""A traced forward on memory allocated once, for timing (replayer.time_replay, GPU only): `bind` a
`replay.Program`, then `load` an input set (untimed) and `call` the steps, as many times as timing.py asks.

Keeps: every load remakes every storage as replay.Program's fresh memory is made (the state's bytes, 0xFF
elsewhere, guard bands), so nothing a kernel leaves in memory reaches the next call; the state's bytes come
from a copy kept on the device where it fits, checked against the record's bytes at the parent's secret
checked calls and after the last. Simplifies: no audit of guard bands between timed calls (the replay
runs on fresh memory do that), and the input sets held beside it are not checked after timing.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from distill.verifier.sandbox.replay import BAND, BAND_BYTE, Program

# The slice in which `Bound.kept_changed` moves a state's record bytes to the device to compare (256 MiB).
KEPT_SLICE = 1 << 28


def bind(program: Program, device: torch.device) -> "Bound":
    """`program` on memory allocated once on `device`."""
    return Bound(program, program._allocate(device))


def _room(device: torch.device) -> int:
    """Bytes this process may still allocate on `device`: its cap (caps.py) less what its allocator holds,
    at most what the device has free. On the CPU, any."""
    if device.type != "cuda":
        return 1 << 62
    cap = torch.cuda.get_device_properties(device).total_memory * torch.cuda.get_per_process_memory_fraction(device)
    return int(min(cap - torch.cuda.memory_reserved(device), torch.cuda.mem_get_info(device)[0]))


class Bound:
    """A record on memory allocated once: `load` places an input set (untimed), `call` runs the steps
    as forward would, without the poison fills a fresh `torch.empty` never had (timing.py times it).

    `load` also makes every storage as `_allocate` made it (the state's bytes, 0xFF elsewhere, the
    guard bands): memory allocated once keeps what the last call left, and with two input sets
    alternating, a kernel keeping a cache of its answers keyed by the input's content in its own scratch
    hit on every timed call while every checked run, on fresh memory, saw it compute (a red-team find).
    Untimed: timing.py flushes L2 after `load`."""

    def __init__(self, program: Program, mem: list[torch.UntypedStorage]) -> None:
        self.program, self.mem = program, mem
        self.subst: dict[float, float] = {}
        # Each state's bytes kept where its storage lives: remade from the host copy at every load, a 4.3 GB
        # weight was 57 s of KernelBench L2 #59's 320 s (52 timed calls, H200 2026-12-01). Where the copy does
        # not fit, the host's. A kept copy is memory the kernels could reach: `kept_changed` checks it after.
        devices = {storage.device for s, storage in zip(program.storages, mem) if s["kind"] == "state"}
        room = {device: _room(device) for device in devices}
        need = 2 * sum(s["nbytes"] for s in program.storages)  # the checked calls' outputs, and slack
        self.kept: list[torch.Tensor | None] = []
        for s, storage in zip(program.storages, mem):
            kept = self._keep(s, storage, room.get(storage.device, 0) - need)
            if kept is not None:
                room[storage.device] -= kept.numel()
            self.kept.append(kept)

    @staticmethod
    def _keep(s: dict[str, Any], storage: torch.UntypedStorage, room: int) -> torch.Tensor | None:
        if s["kind"] != "state" or s["nbytes"] > room:
            return None
        try:  # a copy on the CPU too (the tests' lane): the record's bytes stay what `kept_changed` compares with
            return s["data"].to(storage.device, copy=True)
        except torch.OutOfMemoryError:
            return None

    def kept_changed(self) -> list[str]:
        """The state storages whose kept copy (`__init__`) no longer holds the record's bytes: a store outside
        every tensor of the record, which would reach the next load (compared in slices on the device)."""
        found = []
        for sid, (s, kept) in enumerate(zip(self.program.storages, self.kept)):
            for a in range(0, s["nbytes"] if kept is not None else 0, KEPT_SLICE):
                b = min(a + KEPT_SLICE, s["nbytes"])
                if not torch.equal(kept[a:b], s["data"][a:b].to(kept.device)):
                    found.append(f"state storage {sid}'s bytes kept for the timed calls changed while they ran "
                                 "(a store outside every tensor of the record)")
                    break
        return found

    def load(self, inputs: list[Any]) -> None:
        for s, storage, kept in zip(self.program.storages, self.mem, self.kept):
            raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            raw.fill_(BAND_BYTE)
            body = raw[BAND:BAND + s["nbytes"]]
            body.copy_(s["data"] if kept is None else kept) if s["kind"] == "state" else body.fill_(0xFF)
        self.program._point(self.mem)
        self.program._place(self.mem, inputs)
        self.subst = self.program.substitutes(inputs)

    def call(self, kernels: dict[str, Any], launch: Callable[[Any, tuple, tuple, dict], None]) -> list[torch.Tensor]:
        return self.program._execute(self.mem, kernels, False, False, launch, self.subst)
