"""MMF annotation files of the downstream sets: VQA2 imdb ``.npy`` and jsonl files.

- VQA2 imdb: ``np.save`` of an object array of dicts; the first element may be a header
  without ``image_id`` (skipped, as MMF's ``AnnotationDatabase`` does). Its pickle is read
  by a restricted unpickler (plain data and numpy arrays, no other global).
- NLVR2 (``identifier``, ``sentence``, ``label`` "True"/"False") and SNLI-VE
  (``Flikr30kID``, ``sentence1``, ``sentence2``, ``gold_label``) jsonl, one object a line
  (lil-lab ships NLVR2's as ``train.json``, ``dev.json``, ``test1.json``, the same layout
  under a ``.json`` name: ``mmf_uvlp.data_formats.nlvr2_files``).
"""

from __future__ import annotations

import json
import os
from typing import Iterator

from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.safe_loading import load_npy

VQA2_FIELDS = (
    "image_id",
    "image_name",
    "feature_path",
    "question_id",
    "question_str",
    "question_tokens",
    "answers",
    "all_answers",
)
NLVR2_FIELDS = ("identifier", "sentence", "label")
VE_FIELDS = ("Flikr30kID", "sentence1", "sentence2", "gold_label")
VE_LABELS = ("entailment", "neutral", "contradiction")


def _check_fields(path, record, fields, line: int | None = None, key: str | None = None):
    if not isinstance(record, dict):
        raise FormatError(path, "record", "a dict", type(record).__name__, line=line, key=key)
    missing = [f for f in fields if f not in record]
    if missing:
        raise FormatError(
            path, missing[0], f"fields {list(fields)}", sorted(record), line=line, key=key
        )


def read_vqa2_imdb(path: str | os.PathLike) -> Iterator[dict]:
    """Stream the question records of a VQA2 imdb (header skipped)."""
    data = load_npy(path)
    if not data.dtype.hasobject or data.ndim != 1:
        raise FormatError(
            path,
            "imdb",
            "an .npy object array of dicts",
            f"a {data.dtype} array of shape {data.shape}",
        )
    for index, record in enumerate(data):
        if index == 0 and isinstance(record, dict) and "image_id" not in record:
            continue
        _check_fields(path, record, VQA2_FIELDS, key=f"[{index}]")
        if len(record["answers"]) != 10:
            raise FormatError(
                path, "answers", "10 answers", len(record["answers"]), key=f"[{index}]"
            )
        yield record


def numbered_jsonl(
    path: str | os.PathLike, fields: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict]]:
    """Stream ``(line, record)`` of a jsonl file whose records must have ``fields``; blank
    lines are passed over, a line that is not UTF-8 is a :class:`FormatError` naming it."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(
                    path,
                    "text",
                    f"UTF-8 text ({e.reason} at byte {e.start})",
                    raw[max(0, e.start - 20) : e.start + 20],
                    line=number,
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise FormatError(
                    path, "json", f"valid json ({e.msg})", line.strip(), line=number
                ) from None
            _check_fields(path, record, fields, line=number)
            yield number, record


def read_jsonl(path: str | os.PathLike, fields: tuple[str, ...] = ()) -> Iterator[dict]:
    """Stream a jsonl file whose records must have ``fields``."""
    for _, record in numbered_jsonl(path, fields):
        yield record


def check_nlvr2(path: str | os.PathLike, line: int, record: dict) -> dict:
    """One NLVR2 record: ``label`` "True" or "False", ``identifier``
    ``<split>-<set>-<pair>-<sentence>``, ``sentence`` a non-empty string (MMF's NLVR2
    dataset tokenizes it); returned unchanged."""
    sentence = record["sentence"]
    if not isinstance(sentence, str) or not sentence.strip():
        raise FormatError(path, "sentence", "a non-empty string", json.dumps(sentence), line=line)
    if record["label"] not in ("True", "False"):
        raise FormatError(path, "label", '"True" or "False"', record["label"], line=line)
    if not isinstance(record["identifier"], str) or len(record["identifier"].split("-")) != 4:
        raise FormatError(
            path, "identifier", "<split>-<set>-<pair>-<sentence>", record["identifier"], line=line
        )
    return record


def read_nlvr2(path: str | os.PathLike) -> Iterator[dict]:
    """Stream NLVR2 records (one json object a line), checked by :func:`check_nlvr2`."""
    for number, record in numbered_jsonl(path, NLVR2_FIELDS):
        yield check_nlvr2(path, number, record)


def read_visual_entailment(path: str | os.PathLike) -> Iterator[dict]:
    """Stream SNLI-VE records; ``gold_label`` must be one of the three labels."""
    for number, record in numbered_jsonl(path, VE_FIELDS):
        if record["gold_label"] not in VE_LABELS:
            raise FormatError(
                path, "gold_label", f"one of {list(VE_LABELS)}", record["gold_label"], line=number
            )
        yield record
