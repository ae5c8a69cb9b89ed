"""MMF 1.0.0rc10's ``MultiDatasetLoader`` across epochs: each epoch starts with fresh
bookkeeping, and ``__next__`` moves on until every dataset is exhausted (the functions the
``uvlp`` trainer's own loader calls: :mod:`mmf_uvlp.trainers.data_order`)."""

from __future__ import annotations

import functools
from typing import Any


def reset_each_epoch() -> None:
    """``__iter__`` resets the finished/used-once bookkeeping; ``__next__`` skips every
    exhausted dataset."""
    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

    from mmf_uvlp.trainers.data_order import begin_epoch, next_batch

    iter_ = MultiDatasetLoader.__iter__

    @functools.wraps(iter_)
    def __iter__(self: MultiDatasetLoader) -> Any:
        begin_epoch(self)
        return iter_(self)

    MultiDatasetLoader.__iter__ = __iter__
    MultiDatasetLoader.__next__ = next_batch
