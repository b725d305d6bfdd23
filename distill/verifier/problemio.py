"""A problem's module and its seeded inputs, made the same way in the reference and in a worker.

Inputs never travel between processes: each side regenerates them from the secret per-job seed
and both report a fingerprint, which the parent compares (a problem whose `get_inputs` ignores the
seed is reported, not silently mis-verified).
"""
from __future__ import annotations

import hashlib
import random
import secrets
import types
from typing import Any

import numpy
import torch

from distill.verifier import codec


class ProblemError(ValueError):
    """The problem itself (not the candidate) could not be built or run."""


class ReferenceFailed(ProblemError):
    """The problem's own failure, decided by the parent from what only trusted processes said (the
    reference process's screening, trials and memory plan; the parent's reading of the problem's text):
    it says nothing of a candidate. Any other ProblemError may come from a process a candidate ran in
    (a worker's memory or disk, a replay of its record, the CPU lane's refusal of a construct it uses),
    so a check that a candidate's run decides (the resized twin, twins.check_resized) never reads one
    as "the problem broke": a candidate raising "no space left on device" on a twin only kept its pass."""


class ResourceError(ProblemError):
    """The verifier's own memory limit, hit outside the candidate's doing: a harness step (making or
    refilling inputs, copies, the replay, sending outputs) past a worker's host cap, or an
    out-of-memory error while the candidate's own allocations were within its budget. A ProblemError,
    so every caller that never charges a candidate for the problem treats it so (verify_many returns
    it, the reward scores it "error", a pipeline records `verifier_error`); its own type says the
    problem may well fit a larger machine. `step` names where, the byte figures what was held and
    allowed (None where unknown), `resource` which limit: "host" or "device" memory, or "time" (a
    harness step past its phase's limit)."""

    def __init__(self, message: str, step: str = "", used_bytes: int | None = None,
                 limit_bytes: int | None = None, resource: str = "host") -> None:
        super().__init__(message)
        self.step, self.used_bytes, self.limit_bytes, self.resource = step, used_bytes, limit_bytes, resource


def load_problem(source: str, cache: dict[str, types.ModuleType]) -> types.ModuleType:
    key = hashlib.sha256(source.encode()).hexdigest()
    if key not in cache:
        mod = types.ModuleType(f"tritonforge_problem_{key[:12]}")
        exec(compile(source, f"<problem {key[:12]}>", "exec"), mod.__dict__)  # noqa: S102 - trusted: synth's own text
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if name not in mod.__dict__:
                raise ReferenceFailed(f"problem defines no {name}")
        cache[key] = mod
    return cache[key]


def seed_all(seed: int) -> None:
    """Seed torch, random and numpy for `seed`, the same way in every process of a job, without
    leaving `seed` readable by code that runs afterwards (a candidate's constructor and forward).

    Torch's CPU generator draws `seed`'s sequence but reports a random decoy as its initial seed;
    random, numpy and the CUDA generators take seeds hashed from `seed`. With the seed itself in hand
    (`torch.initial_seed()`, or numpy's state, whose first word was the seed), a constructor replayed
    the CPU generator in plain Python and knew every initialised weight without reading a tensor,
    then fed a folded weight product back through host fills (hostile fixture seed_fold_fills)."""
    torch.manual_seed(seed)
    state = torch.get_rng_state()
    # the state's first 8 bytes are its recorded initial seed (little-endian uint64), not the sequence
    state[:8] = torch.tensor(list(secrets.randbits(63).to_bytes(8, "little")), dtype=torch.uint8, device="cpu")
    torch.set_rng_state(state)
    torch.cuda.manual_seed_all(_hashed(seed, b"cuda"))  # deferred until CUDA starts, as manual_seed's
    random.seed(_hashed(seed, b"random"))
    numpy.random.seed(_hashed(seed, b"numpy") % (1 << 32))


def _hashed(seed: int, what: bytes) -> int:
    """A 63-bit seed for generator `what`, from `seed` by SHA-256: nothing leads back to `seed`."""
    return int.from_bytes(hashlib.sha256(what + b":" + str(int(seed)).encode()).digest()[:8], "little") >> 1


def make_inputs(mod: types.ModuleType, seed: int, device: torch.device | str = "cpu") -> list[Any]:
    """The problem's inputs for `seed`, made on `device`.

    `get_inputs` runs with `device` as the default device, so its factory calls allocate and fill
    there: on a GPU, tens of millions of random numbers take microseconds instead of a fraction of
    a second of host time per input set. Every process of a job makes its inputs on the same
    device, so the values (and the fingerprints the parent compares) agree. A `get_inputs` that
    cannot run that way (one that reads values back with `.numpy()`) runs on the host."""
    device = torch.device(device)
    values = None
    if device.type != "cpu":
        try:
            seed_all(seed)
            with device:
                values = list(mod.get_inputs())
        except Exception:  # noqa: BLE001 - the host path below reports a real problem error
            values = None
    if values is None:
        seed_all(seed)
        values = list(mod.get_inputs())
    return [v.detach().to(device) if isinstance(v, torch.Tensor) else v for v in values]


def fingerprint(values: list[Any]) -> list[str]:
    """Dtype, shape and two integer checksums of each tensor's raw bits (a plain and a position-
    weighted sum), computed where the tensor lives: on a GPU that is microseconds, where hashing
    host copies cost a fifth of a second per job. Integer sums wrap identically in any order, so
    the reference and a worker agree exactly."""
    out = []
    for v in values:
        if type(v) is torch.Tensor:
            out.append(f"{v.dtype}{list(v.shape)}:{_checksum(v)}")
        else:
            out.append(repr(v)[:200])
    return out


_CHUNK = 1 << 24  # words per step: the int64 temporaries stay at 3 x 128 MiB whatever the input's size


def _checksum(t: torch.Tensor) -> str:
    """Both sums over chunks, each wrapped to 64 bits: the same value at any chunk size. Whole-tensor
    int64 temporaries were 4-6 times the input's own bytes (38 GB for a 6.4 GB input)."""
    u8 = codec.raw_u8(t)
    if u8.numel() == 0:
        return "empty"
    try:
        words = u8.view(torch.int32) if u8.numel() % 4 == 0 else u8
    except RuntimeError:  # a storage offset that is not a whole number of words
        words = u8
    plain = weighted = 0
    for start in range(0, words.numel(), _CHUNK):
        part = words[start:start + _CHUNK].to(torch.int64)
        weights = torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64) % 251 + 1
        plain = (plain + int(part.sum())) % (1 << 64)
        weighted = (weighted + int((part * weights).sum())) % (1 << 64)
    return f"{plain:x}.{weighted:x}"
