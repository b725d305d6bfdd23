"""Raw bytes of tensors whatever their strides: a one-element tensor may keep any stride through
`contiguous()` (a (1, 1) output of a kernel that wrote it with stride 256 did), and the wire, the arena
and the fingerprints all read raw bytes."""
import torch

from distill.verifier.codec import raw_u8


def test_raw_bytes_of_a_one_element_tensor_with_a_wide_stride():
    t = torch.empty_strided((1, 1), (256, 256))
    t.fill_(1.5)
    assert torch.equal(raw_u8(t), raw_u8(torch.tensor([1.5])))
    assert torch.equal(raw_u8(torch.arange(6.0).reshape(2, 3).t()), raw_u8(torch.tensor([0.0, 3.0, 1.0, 4.0, 2.0, 5.0])))
    assert raw_u8(torch.zeros(0)).numel() == 0
