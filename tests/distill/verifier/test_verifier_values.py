"""Values, not names, decide compute: every ATen op a phase records is named by `policy.op_name`, and an
allowed op (a copy, a view, a fill) that changes values is compute wherever it runs."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distill.verifier import policy
from distill.verifier.sandbox import provenance


class _Names(TorchDispatchMode):
    """The names the worker's modes would record for what runs inside."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.names.append(policy.op_name(func._schema.name, args, kwargs))
        return func(*args, **kwargs)


def _computed(fn) -> list[str]:
    with _Names() as mode:
        fn()
    return [n for n in mode.names if policy.is_compute(n)]


X = torch.randn(8)
I64 = torch.arange(-4, 4)
MASK = torch.rand(8) > 0.5
H16, B16 = X.half(), X.bfloat16()
I8 = torch.arange(-4, 4, dtype=torch.int8)
C64 = torch.view_as_complex(X.view(4, 2))

CHANGES_VALUES = {
    "narrowing cast": (lambda: I64.to(torch.int32), "aten::_to_copy(int64->int32)"),
    "masking cast": (lambda: I64.to(torch.uint8), "aten::_to_copy(int64->uint8)"),
    "sign change": (lambda: I64.to(torch.int8).to(torch.uint8), "aten::_to_copy(int8->uint8)"),
    "bool cast": (lambda: I64.bool(), "aten::_to_copy(int64->bool)"),
    "float cast": (lambda: X.half(), "aten::_to_copy(float32->float16)"),
    "fp16 to bf16 (fewer mantissa bits)": (lambda: H16.bfloat16(), "aten::_to_copy(float16->bfloat16)"),
    "cat promoting an integer to a float": (lambda: torch.cat([I64, X]), "aten::cat(int64->float32)"),
    "int to float": (lambda: I64.float(), "aten::_to_copy(int64->float32)"),
    # a join converts into its out= tensor's dtype (red-team pass 10)
    "cat into a narrower out=": (lambda: torch.cat([I64], out=torch.empty(8, dtype=torch.uint8)),
                                 "aten::cat(int64->uint8)"),
    "stack into a bf16 out=": (lambda: torch.stack([X], out=torch.empty(1, 8, dtype=torch.bfloat16)),
                               "aten::stack(float32->bfloat16)"),
    # a copy that reads a lazily conjugated view negates imaginary parts (red-team pass 10)
    "copy_ from a conjugate view": (lambda: torch.empty(4, dtype=torch.complex64).copy_(C64.conj()), "aten::copy_(conj)"),
    "clone of a conjugate view": (lambda: C64.conj().clone(), "aten::clone(conj)"),
    "copy_ narrowing": (lambda: torch.empty(8, dtype=torch.int16).copy_(I64), "aten::copy_(int64->int16)"),
    "setitem cast": (lambda: torch.empty(8, dtype=torch.int32).__setitem__(slice(None), X), "aten::copy_(float32->int32)"),
    "fill_ from a tensor": (lambda: torch.empty(8, dtype=torch.int32).fill_(X[0]), "aten::fill_(float32->int32)"),
    "view int8 as uint8 (torch's wrapping cast)": (lambda: I8.view(torch.uint8), "aten::view(int8->uint8)"),
    "view as bf16 halves": (lambda: X.view(torch.bfloat16)[1::2].contiguous(), "aten::view(float32->bfloat16)"),
    "view uint8 as bool": (lambda: MASK.view(torch.uint8).view(torch.bool), "aten::view(uint8->bool)"),
    "tensor over a storage": (lambda: torch.empty(0, dtype=torch.int32).set_(X.untyped_storage(), 0, (8,), (1,)),
                              "aten::set_(storage)"),
    "legacy constructor on a storage": (lambda: torch.IntTensor(X.untyped_storage()), "aten::set_(storage)"),
    "storage-to-storage bytes": (lambda: torch.empty(8, dtype=torch.int32).untyped_storage().copy_(X.untyped_storage()),
                                 "aten::set_(storage)"),
}

KEEPS_VALUES = {
    "view(-1)": lambda: X.view(-1),
    "reshape, transpose, contiguous": lambda: X.reshape(2, 4).t().contiguous(),
    "same-dtype view": lambda: X.view(torch.float32),
    "same-dtype to": lambda: X.to(torch.float32, copy=True),
    "to(device)": lambda: X.to("cpu", copy=True),
    "clone": lambda: X.clone(),
    "same-dtype copy_": lambda: torch.empty(8).copy_(X),
    "integer widening": lambda: torch.zeros(8, dtype=torch.int32).to(torch.int64),
    "float widening": lambda: (X.double(), H16.float(), B16.to(torch.float64), torch.empty(8).copy_(H16)),
    "cat and stack of one dtype, or widening": lambda: (torch.cat([X, X]), torch.stack([X, X]), torch.cat([H16, X])),
    "cat into a widening or same-dtype out=": lambda: (torch.cat([I8], out=torch.empty(8, dtype=torch.int64)),
                                                       torch.cat([X, X], out=torch.empty(16))),
    "copy_ widening": lambda: torch.empty(8, dtype=torch.int64).copy_(torch.zeros(8, dtype=torch.int16)),
    "bool to uint8": lambda: MASK.to(torch.uint8),
    "bool bytes as uint8": lambda: MASK.view(torch.uint8),
    # a kernel's bit trick set up on the host (sign bits, fp8 and int packing): no cast gives these numbers
    "same-width view between a float and an integer": lambda: (X.view(torch.int32), H16.view(torch.int16),
                                                               X.view(torch.int32).view(torch.float32)),
    "allocation in another dtype": lambda: (torch.empty_like(X, dtype=torch.int8), torch.zeros_like(I64, dtype=torch.float32)),
    "complex parts": lambda: torch.view_as_real(torch.view_as_complex(X.view(4, 2))),
    "a conjugate view, and copies of a resolved one": lambda: (C64.conj(), C64.conj().conj().clone(), C64.clone()),
    "fill_ with a number": lambda: torch.empty(8, dtype=torch.int32).fill_(3),
}


@pytest.mark.parametrize("name", CHANGES_VALUES)
def test_an_allowed_op_that_changes_values_is_compute(name):
    fn, expected = CHANGES_VALUES[name]
    assert expected in _computed(fn)


@pytest.mark.parametrize("name", KEEPS_VALUES)
def test_layout_and_value_keeping_copies_are_not_compute(name):
    assert _computed(KEEPS_VALUES[name]) == []


def test_a_tensor_subclass_cannot_lie_about_its_dtype():
    class Liar(torch.Tensor):
        @property
        def dtype(self):
            return torch.int64

    assert "aten::_to_copy(float32->int64)" in _computed(lambda: X.as_subclass(Liar).to(torch.int64))


def test_every_phase_names_ops_alike():
    """The constructor's count (OpCount, the reference's and the worker's) and forward's audit use one name."""
    with policy.OpCount() as count:
        I64.to(torch.uint8)
        I8.view(torch.uint8)
    assert count.counts == {"aten::_to_copy(int64->uint8)": 1, "aten::view(int8->uint8)": 1, "aten::detach": 1}
    assert provenance.is_compute is policy.is_compute and provenance.ALLOWED_OPS is policy.ALLOWED_OPS


def test_construct_compute_counts_casts_beyond_the_reference():
    from distill.verifier import judge

    ref = {"aten::_to_copy(float32->float16)": 1, "aten::mul": 1}
    same = {"aten::_to_copy(float32->float16)": 1, "aten::mul": 1, "aten::empty": 3}
    assert judge.construct_compute(same, ref) == []
    assert judge.construct_compute({**same, "aten::_to_copy(float32->int8)": 1}, ref) == \
        ["aten::_to_copy(float32->int8) x1"]
