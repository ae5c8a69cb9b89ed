"""CUDA's stream calls imitated on a CPU and recorded, for a whole ``mmf_run`` of the
``uvlp`` trainer: the side-stream copy of the next batch
(:class:`mmf_uvlp.trainers.side_stream.SideStreamCopy`) is switched on as on a GPU, and
every stream call, copy and forward pass is written, one JSON line each, to a log.

Run as ``python cuda_streams.py LOG MMF_RUN_ARGS...``: the stand-ins are installed, then
MMF's own ``mmf_run`` runs in this process (on MMF 1.0.0rc10 or MMF main);
``python cuda_streams.py --verdict LOG`` prints :func:`verdict`'s line and fails unless it
holds. :func:`read_log` reads the log back;
:func:`forward_passes` says, for each forward pass, whether its batch was copied ahead and,
if so, whether the computing stream waited for the copy and recorded its tensors.

The lines: ``["start", event, pointers]`` (a copy began on the side stream: the batch's
tensors, their data pointers); ``["event", event, stream]`` (an event recorded);
``["wait", stream, event]``; ``["record", pointer, stream]``; ``["forward", pointers]``
(the tensors uvla's forward pass was given).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

COMPUTING, SIDE = "computing", "side"


class _Log:
    def __init__(self, path: str) -> None:
        self.file = open(path, "w")

    def __call__(self, *entry: Any) -> None:
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()


def install(path: str) -> None:
    """The stand-ins for CUDA's streams and events, and the recording of copies and forward
    passes, into this process's torch and plugin."""
    import torch

    from mmf_uvlp.models.uvla import UVLA
    from mmf_uvlp.trainers import side_stream

    log, numbers = _Log(path), itertools.count()
    current: List[Any] = []
    recorded: List[int] = []  # the events recorded, in order

    class Stream:
        def __init__(self, name: str = SIDE) -> None:
            self.name = name

        def wait_event(self, event: Any) -> None:
            log("wait", self.name, event.number)

    computing = Stream(COMPUTING)

    class Event:
        def __init__(self) -> None:
            self.number = next(numbers)

        def record(self, stream: Any = None) -> None:
            recorded.append(self.number)
            log("event", self.number, (stream or computing).name)

    @contextlib.contextmanager
    def stream(chosen: Any) -> Iterator[None]:
        current.append(chosen)
        try:
            yield
        finally:
            current.pop()

    torch.cuda.Stream = lambda device=None: Stream()
    torch.cuda.Event = Event
    torch.cuda.stream = stream
    torch.cuda.current_stream = lambda device=None: current[-1] if current else computing
    torch.Tensor.record_stream = lambda tensor, used_on: log(
        "record", tensor.data_ptr(), used_on.name
    )

    init, start = side_stream.SideStreamCopy.__init__, side_stream.SideStreamCopy.start

    def gpu_init(self: Any, device: Any) -> None:
        init(self, device)
        self.stream = torch.cuda.Stream(self.device)  # as on a GPU: a stream of its own

    def logged_start(self: Any, batch: Any) -> Any:
        copied = start(self, batch)  # the copy's event: the one recorded while it began
        log("start", recorded[-1], _pointers(getattr(copied, "batch", copied)))
        return copied

    side_stream.SideStreamCopy.__init__ = gpu_init
    side_stream.SideStreamCopy.start = logged_start

    forward = UVLA.forward

    def logged_forward(self: Any, sample_list: Any, *args: Any, **kwargs: Any) -> Any:
        if self.training:
            log("forward", _pointers(sample_list))
        return forward(self, sample_list, *args, **kwargs)

    UVLA.forward = logged_forward


def _pointers(batch: Any) -> List[int]:
    from mmf_uvlp.trainers.side_stream import tensors

    return sorted({tensor.data_ptr() for tensor in tensors(batch) if tensor.numel()})


def read_log(path: str) -> List[list]:
    with open(path) as file:
        return [json.loads(line) for line in file]


def forward_passes(entries: Sequence[list]) -> List[Optional[Tuple[bool, int]]]:
    """For each forward pass of training, in order: None when its batch was not copied on
    the side stream, else (whether the computing stream waited for that copy's event
    since the forward pass before, how many of the copied tensors were not recorded on the
    computing stream since then). A batch holds its copied tensors and those the computing
    stream made from them (the dataset's ``prepare_batch`` rebuilds the original features)."""
    passes: List[Optional[Tuple[bool, int]]] = []
    copies: Dict[int, List[int]] = {}
    waited: set = set()
    recorded: set = set()
    for entry in entries:
        kind = entry[0]
        if kind == "start":
            copies[entry[1]] = entry[2]
        elif kind == "wait" and entry[1] == COMPUTING:
            waited.add(entry[2])
        elif kind == "record" and entry[2] == COMPUTING:
            recorded.add(entry[1])
        elif kind == "forward":
            pointers = set(entry[1])  # the copy's, and those the computing stream made
            event = next(
                (event for event, copied in copies.items() if set(copied) <= pointers), None
            )
            if event is None:
                passes.append(None)
            else:
                passes.append((event in waited, len(set(copies[event]) - recorded)))
                del copies[event]
            waited, recorded = set(), set()
    return passes


def verdict(entries: Sequence[list]) -> Tuple[bool, str]:
    """Whether every forward pass after the first computed on a batch copied ahead, waited
    for and recorded, with one event per copy; and a line saying so."""
    passes = forward_passes(entries)
    copies = sum(entry[0] == "start" for entry in entries)
    waits = sum(entry[0] == "wait" for entry in entries)
    good = sum(one == (True, 0) for one in passes[1:])
    ok = len(passes) > 1 and good == len(passes) - 1 and 0 <= copies - waits <= 1
    return ok, (
        f"side stream: {len(passes)} forward passes, {good} of the {len(passes) - 1} "
        f"after the first on a copy waited for and recorded; {copies} copies, "
        f"{waits} waits"
    )


if __name__ == "__main__":
    if sys.argv[1] == "--verdict":  # cuda_streams.py --verdict LOG
        good, line = verdict(read_log(sys.argv[2]))
        print(line)
        sys.exit(0 if good else 1)
    install(sys.argv[1])
    sys.argv = ["mmf_run", *sys.argv[2:]]
    from mmf_cli.run import run

    run()
