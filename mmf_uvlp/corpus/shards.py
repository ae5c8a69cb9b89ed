"""Stage 7: the annotation shards — schema, deterministic writing, reading and merging.

An output directory holds ``annotations/part-CCCCCC.jsonl[.gz]``, one part per chunk ``C`` of
``output.chunk_images`` images (by position in the detections file), and
``annotations/index.json`` listing the parts in order. One JSON record per line and image:

    {"image_id": str, "feature_key": str, "position": int, "image_w": num, "image_h": num,
     "tag_query": str,
     "regions": [{"box": [x1, y1, x2, y2], "label": str, "conf": num}, ...],
     "sentences": [{"rank": int, "sentence_id": int, "text": str, "score": num,
                    "noun_phrases": [{"text": str, "char_span": [s, e], "token_span": [s, e],
                                      "region": int | null, "similarity": num | null,
                                      "link_score": num, "linked": bool}, ...]}, ...]}

``regions`` are all detections of the image, in the detector's order (region ``i`` is row ``i``
of its features). Parts are gzip members written with ``mtime=0`` and no file name, with floats
rounded to ``output.float_digits``: the same inputs give the same bytes.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import shutil
import zlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from mmf_uvlp.utils.atomic import atomic_path

SCHEMA_VERSION = 1
INDEX_NAME = "index.json"


def part_name(chunk: int, fmt: str = "jsonl.gz") -> str:
    return f"part-{chunk:06d}.{fmt}"


def encode_records(records: Sequence[Dict[str, object]], fmt: str = "jsonl.gz") -> bytes:
    text = "".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records
    ).encode("utf-8")
    if fmt == "jsonl":
        return text
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=6) as gz:
        gz.write(text)
    return buffer.getvalue()


def write_part(
    directory: str, chunk: int, records: Sequence[Dict[str, object]], fmt: str = "jsonl.gz"
) -> str:
    from mmf_uvlp.utils.atomic import atomic_write_bytes

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, part_name(chunk, fmt))
    atomic_write_bytes(path, encode_records(records, fmt))
    return path


def read_part(path: str) -> Iterator[Dict[str, object]]:
    for _, record in read_numbered_part(path):
        yield record


def _numbered_lines(path: str) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of a part file; a gzip stream that is cut short or damaged,
    or bytes that are no UTF-8, are a :class:`FormatError` naming the file and the line."""
    from mmf_uvlp.errors import FormatError

    gzipped = path.endswith(".gz")
    number = 0
    try:
        with gzip.open(path, "rb") if gzipped else open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                yield number, raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(path, "text", f"UTF-8 text ({e.reason})", None, line=number) from None
    except (EOFError, OSError, zlib.error) as e:
        if isinstance(e, FileNotFoundError):
            raise
        expected = "a complete gzip stream" if gzipped else "a readable file"
        raise FormatError(
            path,
            "gzip" if gzipped else "file",
            f"{expected} (damaged or cut short: rebuild it)",
            f"{type(e).__name__}: {e}",
            line=number + 1,
        ) from None


def read_numbered_part(path: str) -> Iterator[Tuple[int, Dict[str, object]]]:
    """``(line number, record)`` of one part file; a line that is no JSON object, or a file
    that cannot be decoded, is a :class:`FormatError` naming the file and line."""
    from mmf_uvlp.errors import FormatError

    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise FormatError(
                path, "json", f"a JSON record ({e.msg})", line.strip(), line=number
            ) from None
        if not isinstance(record, dict):
            raise FormatError(path, "record", "a JSON object", type(record).__name__, line=number)
        yield number, record


def part_damage(path: str, images: int, size: Optional[int] = None) -> Optional[str]:
    """Why the part file ``path`` is not the complete part of ``images`` records (of
    ``size`` bytes, when recorded), or None. A gzip part is read to the end of its stream
    (whose CRC covers every byte written), a plain part has every line parsed."""
    from mmf_uvlp.errors import FormatError

    if not os.path.isfile(path):
        return f"{path} is missing"
    if size is not None and os.path.getsize(path) != int(size):
        return (
            f"{path} holds {os.path.getsize(path)} bytes, {size} when written "
            "(damaged or cut short)"
        )
    try:
        if path.endswith(".gz"):  # the stream's CRC and length, checked at its end, cover the text
            count = sum(1 for _, line in _numbered_lines(path) if line.strip())
        else:
            count = sum(1 for _ in read_numbered_part(path))
    except FormatError as e:
        return str(e)
    if count != int(images):
        return f"{path} holds {count} records, the index lists {images}"
    return None


def part_paths(path: str) -> List[str]:
    """The part files of an output (``DIR``, ``DIR/annotations`` or one part file)."""
    if os.path.isfile(path):
        return [path]
    directory = path
    if os.path.isdir(os.path.join(path, "annotations")):
        directory = os.path.join(path, "annotations")
    index_path = os.path.join(directory, INDEX_NAME)
    if os.path.exists(index_path):
        with open(index_path) as handle:
            index = json.load(handle)
        return [os.path.join(directory, p["file"]) for p in index["parts"]]
    return sorted(glob.glob(os.path.join(directory, "part-*.jsonl*")))


def iter_records(path: str) -> Iterator[Dict[str, object]]:
    """Every image record of an output directory, in position order."""
    for part in part_paths(path):
        yield from read_part(part)


def output_damage(directory: str) -> Optional[str]:
    """Why the annotations of an output (``DIR`` or ``DIR/annotations``) are not complete as
    their ``index.json`` lists them, or None (see :func:`part_damage`)."""
    if os.path.isdir(os.path.join(directory, "annotations")):
        directory = os.path.join(directory, "annotations")
    index_path = os.path.join(directory, INDEX_NAME)
    try:
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
        parts = [(p["file"], int(p["images"]), p.get("bytes")) for p in index["parts"]]
    except FileNotFoundError:
        return f"{index_path} is missing"
    except (ValueError, KeyError, TypeError) as e:
        return f"{index_path} is no complete index ({type(e).__name__}: {e})"
    for name, images, size in parts:
        reason = part_damage(os.path.join(directory, name), images, size)
        if reason is not None:
            return reason
    return None


def write_index(directory: str, parts: List[Dict[str, object]], meta: Dict[str, object]) -> None:
    from mmf_uvlp.utils.atomic import atomic_write_json

    data = dict(meta)
    data["schema_version"] = SCHEMA_VERSION
    data["parts"] = parts
    data["images"] = sum(int(p["images"]) for p in parts)
    atomic_write_json(os.path.join(directory, INDEX_NAME), data)


def copy_file(src: str, dst: str) -> None:
    """Copy atomically (a merged output is never half-written)."""
    with atomic_path(dst) as temporary:
        shutil.copyfile(src, temporary)
