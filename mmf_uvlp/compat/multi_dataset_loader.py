"""MMF 1.0.0rc10's ``MultiDatasetLoader`` across epochs: each epoch starts with fresh
bookkeeping, and ``__next__`` moves on until every dataset is exhausted."""

from __future__ import annotations

import functools
from typing import Any


def reset_each_epoch() -> None:
    """``__iter__`` resets the finished/used-once bookkeeping; ``__next__`` skips every
    exhausted dataset."""
    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

    iter_ = MultiDatasetLoader.__iter__

    @functools.wraps(iter_)
    def __iter__(self: MultiDatasetLoader) -> Any:
        self._iterators = []
        self._finished_iterators = {}
        self._used_once = {}
        return iter_(self)

    def __next__(self: MultiDatasetLoader) -> Any:
        while True:
            try:
                batch = next(self._chosen_iterator)
                break
            except StopIteration:
                if not self._proportional_sampling and len(self._used_once) == self.num_datasets:
                    raise
                self._finished_iterators[self.current_index] = 1
                if len(self._finished_iterators) == self.num_datasets:
                    raise
                self.change_dataloader()
        self._used_once[self.current_index] = 1
        return batch

    MultiDatasetLoader.__iter__ = __iter__
    MultiDatasetLoader.__next__ = __next__
