"""Guard bands around every buffer `forward` allocates, so a store past either end is caught.

An out-of-bounds store (a dropped mask, an index one too far) usually lands in allocator slack where
it corrupts nothing the comparison looks at: such a kernel can pass every trial under the
interpreter and then fault on a GPU. `AuditMode` therefore serves each uninitialised allocation made
inside `forward` from a larger buffer whose head and tail bands hold a known pattern; after the call
the worker reads the bands back (never through the candidate's objects) and reports changed bytes.
Inputs of correctness calls sit between bands too (with another pattern): a load past an input's end
reads a value that spoils the result, where allocator slack often holds zeros that a sum or a dot
product would take in silently.

Bands are 4 KiB a side, a multiple of every dtype's size, so the tensor handed out keeps the
alignment a fresh allocation has and a vectorised kernel sees the same pointers modulo 256 bytes.
Kept alive until the check, the buffers raise peak memory of one call by the intermediates `forward`
would otherwise have freed; synth bounds those.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

BAND_BYTES = 4096
_EXPECTED: dict[tuple[torch.dtype, int, bool], bytes] = {}


def _pattern(dtype: torch.dtype, inputs: bool = False) -> float | int | bool:
    # Values a kernel is unlikely to store by accident; ints fit int8 and uint8. Input bands differ
    # from allocation bands, or a tile that reads past an input and stores past its output would
    # copy one pattern onto the other unseen.
    if dtype.is_floating_point and torch.finfo(dtype).max < 1234.5:
        # fp8 (e4m3fn's largest value is 448, e4m3fnuz's 240): the patterns above overflow, and filling an
        # fp8 buffer raised, so every candidate that allocates one (a quantization kernel's output) was a
        # runtime_error on both lanes. These fit every fp8 format torch has.
        return 208.0 if inputs else -224.0
    if dtype.is_floating_point or dtype.is_complex:
        return 1234.5 if inputs else -777.25
    if dtype == torch.bool:
        return True if inputs else False
    return 90 if inputs else 37


def _expected(dtype: torch.dtype, n: int, inputs: bool) -> bytes:
    from distill.verifier import codec

    key = (dtype, n, inputs)
    if key not in _EXPECTED:
        _EXPECTED[key] = codec.tensor_bytes(torch.full((n,), _pattern(dtype, inputs), dtype=dtype))
    return _EXPECTED[key]


@dataclass
class _Banded:
    flat: torch.Tensor
    band: int  # elements per band
    span: int  # elements between the bands
    shape: tuple[int, ...]
    what: str = "buffer allocated in forward"


class Bands:
    """The banded allocations of one `forward` call."""

    def __init__(self) -> None:
        self.items: list[_Banded] = []

    def allocate(self, out: object) -> object:
        """A tensor like `out` (same shape, strides, dtype, device) carved out of a banded buffer."""
        if type(out) is not torch.Tensor or out.numel() == 0 or out.layout != torch.strided:
            return out
        size = out.element_size()
        if BAND_BYTES % size:
            return out
        band = BAND_BYTES // size
        span = out.untyped_storage().nbytes() // size
        flat = torch.empty(span + 2 * band, dtype=out.dtype, device=out.device)
        flat.fill_(_pattern(out.dtype))
        self.items.append(_Banded(flat, band, span, tuple(out.shape)))
        return flat.as_strided(out.size(), out.stride(), band + out.storage_offset())

    def copy_in(self, value: torch.Tensor, device: torch.device) -> torch.Tensor:
        """A contiguous copy of `value` on `device`, between bands: a load past either end reads the
        pattern instead of whatever the allocator left there (often zeros, which a dropped mask on a
        reduction turns into a right answer), and a store there shows in `breaches`."""
        if value.numel() == 0 or value.layout != torch.strided or BAND_BYTES % value.element_size():
            return value.to(device, copy=True)
        band = BAND_BYTES // value.element_size()
        flat = torch.empty(value.numel() + 2 * band, dtype=value.dtype, device=device)
        flat.fill_(_pattern(value.dtype, inputs=True))
        view = flat[band:band + value.numel()].view(value.shape)
        view.copy_(value)
        self.items.append(_Banded(flat, band, value.numel(), tuple(value.shape), "input"))
        return view

    def breaches(self) -> list[str]:
        """One line per buffer whose bands changed: where, and how many bytes."""
        from distill.verifier import codec

        found = []
        for b in self.items:
            want = _expected(b.flat.dtype, b.band, b.what == "input")
            what = f"{list(b.shape)} {str(b.flat.dtype).replace('torch.', '')} {b.what}"
            for side, part in (("before the start of", b.flat[:b.band]), ("past the end of", b.flat[b.band + b.span:])):
                got = codec.tensor_bytes(part)
                if got != want:
                    n = sum(x != y for x, y in zip(got, want))
                    found.append(f"a kernel wrote {n} byte(s) {side} a {what}")
        return found
