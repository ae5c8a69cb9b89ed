"""The global generators' states saved in a checkpoint restore, on the host and from a GPU."""

import random

import numpy as np
import pytest
import torch

from mmf_uvlp.trainers.seeding import rng_state, set_rng_state


class DeviceTensor(torch.Tensor):
    """A tensor as MMF's ``map_location=<cuda device>`` load leaves it: host-only uses raise
    the error a CUDA tensor gives, until ``.cpu()`` copies it to the host."""

    def numpy(self, *args, **kwargs):
        raise TypeError(
            "can't convert cuda:0 device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )

    def tolist(self):
        raise TypeError("tolist() of a cuda:0 tensor in this emulation")

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor).clone()


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def _on_device(state):
    if isinstance(state, torch.Tensor):
        return state.as_subclass(DeviceTensor)
    if isinstance(state, dict):
        return {key: _on_device(value) for key, value in state.items()}
    if isinstance(state, list):
        return [_on_device(value) for value in state]
    return state


@pytest.mark.parametrize("mapped_to_device", [False, True], ids=["host", "gpu-mapped"])
def test_restored_state_repeats_the_same_draws(mapped_to_device):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    _draws()
    saved = rng_state()
    expected = _draws()
    _draws()
    set_rng_state(_on_device(saved) if mapped_to_device else saved)
    assert _draws() == expected
