"""A pickle-free wire format for messages between the trusted parent and its worker processes.

Workers run untrusted code, so whatever they send is parsed as data only: a JSON header plus raw
tensor bytes, validated (dtype allowlist, shape arithmetic, sizes) before anything is built from it.
Unpickling a worker's message would hand it code execution in the parent.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import struct
import sys
import tempfile
import warnings
from typing import Any

import numpy
import torch

# dtype name on the wire -> (torch dtype, bytes per element). Nothing outside this table decodes.
DTYPES: dict[str, tuple[torch.dtype, int]] = {
    "float64": (torch.float64, 8),
    "float32": (torch.float32, 4),
    "float16": (torch.float16, 2),
    "bfloat16": (torch.bfloat16, 2),
    "int64": (torch.int64, 8),
    "int32": (torch.int32, 4),
    "int16": (torch.int16, 2),
    "int8": (torch.int8, 1),
    "uint8": (torch.uint8, 1),
    "bool": (torch.bool, 1),
    "complex64": (torch.complex64, 8),
}
_NAME_OF = {dt: name for name, (dt, _) in DTYPES.items()}
MAX_DEPTH = 32
MAX_HEADER = 64 << 20
MAX_RANK = 64  # no tensor the harness sends has more dims; torch's own kernels stop at 25-64


class CodecError(ValueError):
    """A message that is not well-formed: treated as tampering by the receiver."""


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _NAME_OF:
        raise CodecError(f"dtype {dtype} is not supported on the wire")
    return _NAME_OF[dtype]


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw bytes of a plain tensor (copied to host, contiguous); never calls into subclass code."""
    if type(t) is not torch.Tensor:
        raise CodecError(f"only exact torch.Tensor can be encoded, got {type(t).__name__}")
    dtype_name(t.dtype)  # only dtypes the wire knows
    return raw_u8(t.to("cpu")).numpy().tobytes()


ARENA_ALIGN = 64
# The parent's copies out of an arena at least this large land in reused memory (Arena.landing); a smaller
# one faults few pages, and a clone costs the same.
LANDING_MIN = 64 << 20
LANDING_KEEP = 2  # reused buffers an arena keeps through one command (a call's outputs, sizes apart)


class Arena:
    """Shared memory beside a pipe, for the bulk of a message: tensor bytes are written here and
    the pipe carries their offsets, so a 16 MB output costs one copy on each side instead of a
    trip through the pipe's 64 KiB chunks (each one a GIL round trip in a busy parent).

    The child writes, the parent reads, taking turns: the child resets the arena when a command
    arrives and writes its reply; the parent copies every tensor out (`take`) before it sends the
    next command. What the parent reads is bounds-checked bytes, never code, so a child that
    scribbles here can only change numbers of its own reply.

    A tensor that does not fit goes to the `overflow` arena: a sparse file on disk as large as the
    machine's memory (nothing is allocated until written), its offsets counted past this arena's end.
    A workload-sized output (6 GiB: KernelBench's ReLU) costs the child one host copy and the parent
    one, where the pipe cost each side three (the bytes, their join, the parent's private copy). The
    file's pages stay while a command's messages come (each acked message's successor is written over
    it from the start: pages already there take no fault) and are punched out when its reply is read
    (`settle`): into fresh pages the child's copy took 0.72 s/GiB, into kept ones 0.29 (bench/bench_arena.py
    on the CPU box, 2026-12-01). The parent's copies land the same way (`landing`): a 6 GiB output per call
    copied into fresh memory faulted every page in again, 1.02 s/GiB against 0.37 into kept pages; on the
    H200 the parent's reading was 38 of L1 #20's 101 s and 28 s of its reference's trials (2026-12-02)."""

    PAGE = mmap.PAGESIZE

    def __init__(self, path: str, size: int, create: bool = False, overflow: "Arena | None" = None,
                 align: int = ARENA_ALIGN) -> None:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path, self.size, self.top = path, size, 0
        self.resident = 0  # an overflow's bytes from its start read since the last `settle`: pages kept
        self.landing: list[numpy.ndarray] = []  # the parent's reused destinations, emptied at `settle`
        self.overflow, self.align = overflow, align  # an overflow's tensors start on pages (`drop`)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.buf = torch.frombuffer(self.mm, dtype=torch.uint8)

    def reset(self) -> None:
        self.top = 0
        if self.overflow is not None:
            self.overflow.reset()

    def put(self, t: torch.Tensor) -> int | None:
        """Write `t`'s raw bytes (from host or device); their offset, or None when full."""
        raw = raw_u8(t)
        off = -(-self.top // self.align) * self.align
        if off + raw.numel() > self.size:
            if self.overflow is None:
                return None
            got = self.overflow.put(raw)
            return None if got is None else self.size + got
        self.buf[off:off + raw.numel()].copy_(raw)
        self.top = off + raw.numel()
        return off

    def take(self, off: Any, nbytes: int) -> torch.Tensor:
        """A private copy of `nbytes` at `off`, checked against the arena's bounds (and the overflow's,
        past this arena's end: its pages stay until `settle`)."""
        if type(off) is int and self.overflow is not None and off >= self.size:
            got = self.overflow.take(off - self.size, nbytes)
            self.overflow.resident = max(self.overflow.resident, off - self.size + nbytes)
            return got
        if not (type(off) is int and 0 <= off and off % self.align == 0 and off + nbytes <= self.size):
            raise CodecError("bad arena offset")
        return self._private(self.buf[off:off + nbytes])

    def _private(self, src: torch.Tensor) -> torch.Tensor:
        """A copy of `src` the parent owns, in a landing buffer of its size that nothing holds any more (an
        earlier take's, every tensor over it dropped), else a new one kept for the next take while there
        is room, else a plain clone. Nothing is overwritten while held: a tensor over a buffer holds the
        numpy array (torch.from_numpy), and a buffer is reused only when its one holder is this list."""
        n = src.numel()
        if n < LANDING_MIN:
            return src.clone()
        for i in range(len(self.landing)):
            if self.landing[i].nbytes == n and sys.getrefcount(self.landing[i]) == 2:  # the list, the call
                return torch.from_numpy(self.landing[i]).copy_(src)
        if len(self.landing) < LANDING_KEEP:
            self.landing.append(numpy.empty(n, dtype=numpy.uint8))
            return torch.from_numpy(self.landing[-1]).copy_(src)
        return src.clone()

    def settle(self) -> None:
        """Punch out the overflow's pages kept while a command's messages came (its reply was read), and
        let the landing buffers go (a tensor still over one keeps it)."""
        self.landing.clear()
        if self.overflow is not None:
            self.overflow.landing.clear()
            if self.overflow.resident:
                self.overflow.drop(0, self.overflow.resident)
                self.overflow.resident = 0

    def release(self) -> None:
        """Punch every page out of this arena and its overflow (their child is dead: whatever it left unread
        would otherwise hold memory or disk until this object is collected)."""
        self.drop(0, self.size)
        self.landing.clear()
        if self.overflow is not None:
            self.overflow.release()

    def drop(self, off: int, nbytes: int) -> None:
        """Punch the whole pages of [off, off + nbytes) out of the file (the memory they held is freed)."""
        start = -(-off // self.PAGE) * self.PAGE
        end = min(self.size, -(-(off + nbytes) // self.PAGE) * self.PAGE)
        if end > start:
            try:
                self.mm.madvise(mmap.MADV_REMOVE, start, end - start)
            except (OSError, AttributeError, ValueError):
                pass  # a file system without hole punching keeps the pages until the file is closed


def raw_u8(t: torch.Tensor) -> torch.Tensor:
    """A tensor's raw bytes as a flat uint8 tensor where the tensor lives (NaN payloads, signed
    zeros and padding-free complex pairs included): what the wire, the arena, the inputs-unchanged
    check and the input fingerprints all read."""
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # one element may keep any stride through contiguous()
        flat = torch.empty(flat.shape, dtype=flat.dtype, device=flat.device).copy_(flat)
    return flat.view(torch.uint8)


def overflow_dir() -> str:
    """Where a child's reply overflow lives (its scratch disk, beside the job's spill files)."""
    return tempfile.gettempdir()


def overflow_bytes() -> int:
    """An arena overflow's size: the machine's memory (a sparse file: nothing is allocated until written)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 64 << 30


def reply_arena(tag: str, size: int) -> tuple[Arena | None, dict[str, Any]]:
    """A child's reply arena (`size` bytes in shm_dir) with its overflow (a sparse file in overflow_dir as
    large as the machine's memory, so a reply's size is bounded by the child's host cap alone), both named
    `tag`; and what the child's `open_arena` needs. (None, {}) where none can be made: replies then carry
    their tensors inline; an arena without an overflow sends what does not fit inline."""
    overflow, cfg = None, {}
    try:
        overflow = Arena(os.path.join(overflow_dir(), tag), overflow_bytes(), create=True, align=Arena.PAGE)
        cfg = {"overflow": overflow.path, "overflow_bytes": overflow.size}
    except OSError:
        pass
    try:
        arena = Arena(os.path.join(shm_dir(), tag), size, create=True, overflow=overflow)
    except OSError:
        if overflow is not None:
            os.unlink(overflow.path)
        return None, {}
    return arena, {**cfg, "arena": arena.path, "arena_bytes": size}


def open_arena(cfg: dict[str, Any]) -> Arena | None:
    """The child's end of its arena and of its overflow (None: replies carry their tensors inline)."""
    try:
        overflow = Arena(cfg["overflow"], int(cfg["overflow_bytes"]), align=Arena.PAGE) if cfg.get("overflow") else None
    except (OSError, ValueError):
        overflow = None
    try:
        return Arena(cfg["arena"], int(cfg["arena_bytes"]), overflow=overflow) if cfg.get("arena") else None
    except (OSError, ValueError):
        return None


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"


def encode(obj: Any, arena: Arena | None = None) -> bytes:
    blobs: list[bytes] = []

    def enc(x: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError("message nested too deeply")
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(x, (list, tuple)):
            items = [enc(v, depth + 1) for v in x]
            return items if isinstance(x, list) else {"__tuple__": items}
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise CodecError("dict keys must be strings")
            return {"__dict__": {k: enc(v, depth + 1) for k, v in x.items()}}
        if isinstance(x, bytes):
            blobs.append(x)
            return {"__bytes__": len(blobs) - 1}
        if isinstance(x, torch.Tensor):
            if type(x) is torch.Tensor and arena is not None and x.numel() > 0:
                name = dtype_name(x.dtype)
                off = arena.put(x)
                if off is not None:
                    return {"__arena__": off, "dtype": name, "shape": list(x.shape)}
            blobs.append(tensor_bytes(x))
            return {"__tensor__": len(blobs) - 1, "dtype": dtype_name(x.dtype), "shape": list(x.shape)}
        raise CodecError(f"cannot encode {type(x).__name__}")

    header = json.dumps(enc(obj, 0), allow_nan=False).encode()
    parts = [struct.pack("<II", len(header), len(blobs)), header]
    parts += [struct.pack("<Q", len(b)) for b in blobs]
    parts += blobs
    return b"".join(parts)


def decode(data: bytes, arena: Arena | None = None) -> Any:
    """Parse a message; raises CodecError on anything malformed."""
    try:
        hlen, nblobs = struct.unpack_from("<II", data, 0)
        if hlen > MAX_HEADER or nblobs > 1 << 20:
            raise CodecError("header too large")
        header = json.loads(data[8:8 + hlen].decode())
        off = 8 + hlen
        sizes = struct.unpack_from(f"<{nblobs}Q", data, off)
        off += 8 * nblobs
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        # RecursionError: a header of ~1,000+ nested brackets stops json's own parser (2026-12-02: it escaped
        # decode as itself, not as the tampering it is)
        raise CodecError(f"malformed message: {type(exc).__name__}") from None
    view = memoryview(data)
    blobs = []
    for size in sizes:
        if off + size > len(data):
            raise CodecError("truncated message")
        blobs.append(view[off:off + size])
        off += size
    if off != len(data):
        raise CodecError("trailing bytes in message")

    def dec(x: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError("message nested too deeply")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [dec(v, depth + 1) for v in x]
        if not isinstance(x, dict) or len(x) == 0:
            raise CodecError("unexpected JSON value")
        if "__tuple__" in x:
            return tuple(dec(v, depth + 1) for v in _list(x["__tuple__"]))
        if "__dict__" in x:
            inner = x["__dict__"]
            if not isinstance(inner, dict):
                raise CodecError("bad dict")
            return {str(k): dec(v, depth + 1) for k, v in inner.items()}
        if "__float__" in x:
            text = x["__float__"]
            if text not in ("nan", "inf", "-inf"):
                raise CodecError("bad float")
            return float(text)
        if "__bytes__" in x:
            return bytes(blobs[_index(x["__bytes__"], len(blobs))])
        if "__tensor__" in x:
            return _tensor(x, blobs)
        if "__arena__" in x and arena is not None:
            return _tensor(x, blobs, arena)
        raise CodecError("unknown tag")

    return dec(header, 0)


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise CodecError("expected a list")
    return x


def _index(i: Any, n: int) -> int:
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
        raise CodecError("bad blob index")
    return i


def _tensor(x: dict, blobs: list, arena: Arena | None = None) -> torch.Tensor:
    name, shape = x.get("dtype"), x.get("shape")
    if name not in DTYPES or not isinstance(shape, list):
        raise CodecError(f"bad tensor header {name!r}")
    if len(shape) > MAX_RANK or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 1 << 40
                                        for s in shape):
        raise CodecError("bad tensor shape")
    dtype, width = DTYPES[name]
    numel = math.prod(shape)
    if arena is not None:
        if numel == 0:
            raise CodecError("empty tensor in the arena")
        raw = arena.take(x["__arena__"], numel * width)
    else:
        blob = blobs[_index(x["__tensor__"], len(blobs))]
        if numel * width != len(blob):
            raise CodecError(f"tensor size mismatch: {numel}x{width} != {len(blob)}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        # bytearray: a private, writable copy the tensor owns
        raw = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    if dtype.is_complex:
        return torch.view_as_complex(raw.view(torch.float32).reshape(*shape, 2))
    return raw.view(dtype).reshape(shape)
