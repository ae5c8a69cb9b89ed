"""The side-stream copy of the next batch (:mod:`mmf_uvlp.trainers.side_stream`) as it runs
on a GPU, with CUDA's stream calls imitated on the CPU and recorded: the computing stream
waits for each copy and every copied tensor, nested ones included, is recorded on it; and
the same through a whole ``mmf_run`` of the ``uvlp`` trainer, where MMF's own
``DatasetLoader.prepare_batch`` rebuilds each batch it is handed."""

import subprocess
import sys
import types
from typing import Any, List

import torch
from mmf.common.sample import SampleList

from mmf_uvlp.trainers.side_stream import SideStreamCopy

from helpers import HOLDOUT, REPO, TINY
from helpers import cuda_streams


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
    monkeypatch.setattr(
        torch.Tensor,
        "record_stream",
        lambda tensor, stream: recorded.append((tensor.data_ptr(), stream)),
    )
    copy = SideStreamCopy("cpu")
    copy.stream = _Stream()  # as on a GPU: the copy runs on a stream of its own
    batch = SampleList(
        {
            "region_features": torch.ones(2, 3, 4),
            "image_id": ["a", "b"],
            "lm_label_index": {"values": torch.zeros(5, 2, dtype=torch.long)},
            "region_restore_rows": {"values": torch.ones(7, 4)},
        }
    )
    copied = copy.start(batch)
    moved = copied.batch
    assert copy.ready(copied) is moved and computing.waited == [copied.event]
    expected = {
        moved.region_features.data_ptr(),
        moved.lm_label_index["values"].data_ptr(),
        moved.region_restore_rows["values"].data_ptr(),
    }
    assert {pointer for pointer, stream in recorded} == expected  # the ragged fields too
    assert all(stream is computing for _, stream in recorded)


def test_through_mmf_run_every_batch_after_the_first_is_waited_for_and_recorded(
    tiny_corpus, tmp_path
):
    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    log = tmp_path / "streams.jsonl"
    command = [
        sys.executable,
        cuda_streams.__file__,
        str(log),
        f"config={config}",
        f"env.data_dir={tiny_corpus.parent}",
        f"env.save_dir={tmp_path / 'save'}",
        *HOLDOUT,
        "training.max_updates=6",
        "training.checkpoint_interval=100",
        "training.evaluation_interval=100",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    entries = cuda_streams.read_log(str(log))
    passes = cuda_streams.forward_passes(entries)
    assert len(passes) == 6, passes
    assert passes[0] is None  # the first batch: moved by MMF on the computing stream
    assert passes[1:] == [(True, 0)] * 5, passes  # waited for, every tensor recorded
    starts = [entry for entry in entries if entry[0] == "start"]
    waits = [entry for entry in entries if entry[0] == "wait"]
    assert all(stream == cuda_streams.COMPUTING for _, stream, _ in waits)
    # one event per copy, each waited for once; only the copy begun during the last
    # update is left (dropped with its iterator at the end of training)
    assert sorted(event for *_, event in waits) == [event for _, event, _ in starts][: len(waits)]
    assert len(starts) - len(waits) <= 1, (starts, waits)
