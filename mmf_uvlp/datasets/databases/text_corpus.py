"""Text corpora (one sentence a line) as an MMF annotation database: one item per sentence.

``path``: one UTF-8 file, or several joined by commas (MMF's way of giving one dataset
entry several files); blank lines are skipped. Item: ``{"sentence": str}``.

Split: sentences whose number (0-based, over the files in order) is a multiple of
``holdout_every`` form the val/test split, all others the train split; 0 = no hold-out.
"""

from __future__ import annotations

import os
from typing import Dict, List

from torch.utils.data import Dataset

from mmf_uvlp.data_formats.text import read_corpus


def read_sentences(paths: List[str]) -> List[str]:
    """Every sentence of the files, in order."""
    sentences: List[str] = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"text corpus {path!r} does not exist (one sentence a line)")
        sentences.extend(read_corpus(path))
    return sentences


class TextCorpusDatabase(Dataset):
    """The sentences of ``dataset_type``'s split of one or more text files."""

    def __init__(self, path: str, dataset_type: str, holdout_every: int = 0):
        if holdout_every < 0:
            raise ValueError(f"text corpus: holdout_every must be >= 0, got {holdout_every}")
        self.path = path
        self.sentences = [
            sentence
            for number, sentence in enumerate(read_sentences(path.split(",")))
            if holdout_every == 0 or (number % holdout_every == 0) != (dataset_type == "train")
        ]
        if not self.sentences:
            raise ValueError(
                f"text corpus {path!r}: no sentences for the {dataset_type} split "
                f"(holdout_every={holdout_every})"
            )

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, idx: int) -> Dict[str, str]:
        return {"sentence": self.sentences[idx]}
