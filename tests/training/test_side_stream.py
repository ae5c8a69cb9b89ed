"""The side-stream copy of the next batch (:mod:`mmf_uvlp.training.side_stream`) as it runs
on a GPU, with CUDA's stream calls simulated on the CPU: the computing stream waits for the
copy, and every copied tensor, nested ones included, is recorded on it."""

import types
from typing import Any, List

import torch
from mmf.common.sample import SampleList

from mmf_uvlp.training.side_stream import SideStreamCopy


class _Stream:
    def __init__(self) -> None:
        self.waited: List[Any] = []

    def wait_event(self, event: Any) -> None:
        self.waited.append(event)


def test_every_copied_tensor_is_kept_from_reuse_until_the_step_is_done(monkeypatch):
    computing, recorded = _Stream(), []
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: torch.autograd.grad_mode.no_grad())
    monkeypatch.setattr(torch.cuda, "Event", lambda: types.SimpleNamespace(record=lambda s: None))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: computing)
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda tensor, stream: recorded.append((tensor.data_ptr(), stream)))
    copy = SideStreamCopy("cpu")
    copy.stream = _Stream()  # as on a GPU: the copy runs on a stream of its own
    batch = SampleList({"region_features": torch.ones(2, 3, 4), "image_id": ["a", "b"],
                        "lm_label_index": {"values": torch.zeros(5, 2, dtype=torch.long)},
                        "region_restore_rows": {"values": torch.ones(7, 4)}})
    moved = copy.start(batch)
    assert copy.ready(moved) is moved and len(computing.waited) == 1
    expected = {moved.region_features.data_ptr(), moved.lm_label_index["values"].data_ptr(),
                moved.region_restore_rows["values"].data_ptr()}
    assert {pointer for pointer, stream in recorded} == expected  # the ragged fields too
    assert all(stream is computing for _, stream in recorded)
