"""sandbox/inputsets.py's input check: an exact compare with the pristine set, and (where the pristine set
shares the kernels' device) the pristine set's own fingerprints from load, so one write into both copies is
still a change; which sets are compared on the device."""
import torch

from distill.verifier import problemio
from distill.verifier.sandbox import inputsets


def test_a_write_into_the_input_and_its_pristine_set_alike_is_still_a_change():
    values = [torch.randn(1000), 2.5, torch.arange(7)]
    made = problemio.fingerprint(values)
    inputs = [v.clone() if type(v) is torch.Tensor else v for v in values]
    assert inputsets.changed(inputs, values, None, made) == []
    inputs[2][3] += 1
    assert inputsets.changed(inputs, values, None, made) == [2]
    values[0][5] = inputs[0][5] = 0.0  # a wild write into both copies
    assert inputsets.changed(inputs, values, None) == [2]  # the compare alone sees only the other input
    assert inputsets.changed(inputs, values, None, made) == [0, 2]


def test_large_resident_sets_on_a_gpu_and_streamed_sets_are_compared_on_the_device():
    big = [torch.empty(inputsets.DEVICE_COMPARE_BYTES // 4, device="meta"), 3]  # sizes only, nothing allocated
    small = [torch.empty(inputsets.DEVICE_COMPARE_BYTES // 4 - 1, device="meta")]
    gpu = inputsets.InputSets(None, [1, 2], torch.device("cuda"), stream=False)
    cpu = inputsets.InputSets(None, [1, 2], torch.device("cpu"), stream=False)
    streamed = inputsets.InputSets(None, [1, 2], torch.device("cpu"), stream=True)
    assert inputsets.compare_on_device(gpu, big) and not inputsets.compare_on_device(gpu, small)
    assert not inputsets.compare_on_device(cpu, big)  # the CPU lane's host bits are the set itself
    assert inputsets.compare_on_device(streamed, small)
