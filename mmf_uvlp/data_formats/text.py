"""Plain-text corpora (one sentence a line) and ``captions_gt.tsv`` (image_id<TAB>caption)."""

from __future__ import annotations

import os
from typing import Iterator

from mmf_uvlp.errors import FormatError


def read_corpus(path: str | os.PathLike) -> Iterator[str]:
    """Stream the non-empty lines of a UTF-8 corpus, stripped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                yield line


def read_captions(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Stream (image_id, caption) pairs of a captions tsv."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line:
                continue
            columns = line.split("\t")
            if len(columns) != 2 or not columns[0] or not columns[1].strip():
                raise FormatError(
                    path,
                    "columns",
                    "2 tab-separated columns (image_id, caption)",
                    line,
                    line=number,
                )
            yield columns[0], columns[1]
