"""The text corpus, streamed: a compact on-disk index of sentences and fetch-by-id.

Each corpus file holds one sentence per line (UTF-8). A sentence is the line without its line
break and surrounding whitespace. Bad lines (not UTF-8, empty or blank) stop the build naming
file and line, or with ``on_error=skip`` are counted and left out. Sentence ids are 0-based and
count the good sentences of all files in the order given.

The index (``index.bin``, a flat array of ``SENTENCE_DTYPE``) keeps, per sentence, its file
number, 1-based line number, byte offset and byte length of the stripped text, and a 64-bit
hash of its normalised text (``normalize_text``: case-folded, punctuation removed, spaces
collapsed), which is what own-caption exclusion, duplicate removal and the quality check
compare. Memory: 32 bytes per sentence on disk, memory-mapped; the text is read back from the
corpus files on demand (``SentenceStore.texts``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from mmf_uvlp.utils.atomic import atomic_open
from mmf_uvlp.utils.error_policy import ErrorPolicy, make_error

SENTENCE_DTYPE = np.dtype(
    [
        ("file", "<u4"),
        ("line", "<u4"),
        ("offset", "<u8"),
        ("length", "<u4"),
        ("pad", "<u4"),
        ("hash", "<u8"),
    ]
)
INDEX_FILE = "index.bin"
HASHES_FILE = "hashes_sorted.npy"
META_FILE = "meta.json"

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalize_text(text: str) -> str:
    """Case-folded, punctuation to spaces, whitespace collapsed: "A dog." == "a dog"."""
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


def text_hash(text: str) -> int:
    """64-bit hash of the normalised text."""
    digest = hashlib.blake2b(normalize_text(text).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def build_sentence_index(
    files: Sequence[str],
    cache_dir: str,
    policy: ErrorPolicy,
    block: int = 65536,
    progress: bool = False,
) -> Dict[str, object]:
    """Scan the corpus files once; write ``index.bin`` and ``hashes_sorted.npy`` atomically."""
    from tqdm import tqdm

    os.makedirs(cache_dir, exist_ok=True)
    index_path = os.path.join(cache_dir, INDEX_FILE)
    buffer = np.zeros(block, dtype=SENTENCE_DTYPE)
    count = 0
    filled = 0
    lines_read = 0
    total_bytes = sum(os.path.getsize(p) for p in files)
    bar = tqdm(
        total=total_bytes, unit="B", unit_scale=True, desc="index corpus", disable=not progress
    )
    with atomic_open(index_path, "wb", fsync=True) as out:
        for file_no, path in enumerate(files):
            offset = 0
            with open(path, "rb") as handle:
                for line_no, raw in enumerate(handle, start=1):
                    lines_read += 1
                    start = offset
                    offset += len(raw)
                    bar.update(len(raw))
                    body = raw.rstrip(b"\r\n")
                    try:
                        text = body.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        policy.handle(
                            "corpus", make_error(path, line_no, "encoding", "UTF-8", str(exc))
                        )
                        continue
                    stripped = text.strip()
                    if not stripped:
                        policy.handle(
                            "corpus",
                            make_error(
                                path, line_no, "text", "a non-empty sentence", "an empty line"
                            ),
                        )
                        continue
                    lead = len(text) - len(text.lstrip())
                    lead_bytes = len(text[:lead].encode("utf-8"))
                    record = buffer[filled]
                    record["file"] = file_no
                    record["line"] = line_no
                    record["offset"] = start + lead_bytes
                    record["length"] = len(stripped.encode("utf-8"))
                    record["hash"] = text_hash(stripped)
                    filled += 1
                    count += 1
                    if filled == block:
                        out.write(buffer.tobytes())
                        filled = 0
        out.write(buffer[:filled].tobytes())
    bar.close()
    index = (
        np.memmap(index_path, dtype=SENTENCE_DTYPE, mode="r")
        if count
        else np.zeros(0, SENTENCE_DTYPE)
    )
    hashes = np.unique(np.asarray(index["hash"]))
    hashes_path = os.path.join(cache_dir, HASHES_FILE)
    with atomic_open(hashes_path, "wb", temporary=f"{hashes_path}.tmp") as handle:
        np.save(handle, hashes)
    return {"sentences": count, "lines": lines_read, "distinct_texts": int(hashes.size)}


class SentenceStore:
    """Read-only access to an indexed corpus: count, hashes, text by id."""

    def __init__(self, cache_dir: str, files: Sequence[str]) -> None:
        self.cache_dir = cache_dir
        self.files = list(files)
        path = os.path.join(cache_dir, INDEX_FILE)
        if os.path.getsize(path) == 0:
            self.index = np.zeros(0, dtype=SENTENCE_DTYPE)
        else:
            self.index = np.memmap(path, dtype=SENTENCE_DTYPE, mode="r")
        self._sorted_hashes: Optional[np.ndarray] = None
        self._handles: Dict[int, object] = {}

    def __len__(self) -> int:
        return int(self.index.shape[0])

    @property
    def hashes(self) -> np.ndarray:
        return self.index["hash"]

    def in_pool(self, hashes: np.ndarray) -> np.ndarray:
        """Whether each normalised-text hash occurs in the corpus."""
        if self._sorted_hashes is None:
            self._sorted_hashes = np.load(os.path.join(self.cache_dir, HASHES_FILE))
        pool = self._sorted_hashes
        hashes = np.asarray(hashes, dtype=np.uint64)
        if pool.size == 0:
            return np.zeros(hashes.shape, dtype=bool)
        where = np.clip(np.searchsorted(pool, hashes), 0, pool.size - 1)
        return pool[where] == hashes

    def _handle(self, file_no: int):
        handle = self._handles.get(file_no)
        if handle is None:
            handle = open(self.files[file_no], "rb")
            self._handles[file_no] = handle
        return handle

    def text(self, sentence_id: int) -> str:
        rec = self.index[int(sentence_id)]
        handle = self._handle(int(rec["file"]))
        handle.seek(int(rec["offset"]))
        return handle.read(int(rec["length"])).decode("utf-8")

    def texts(self, ids: Iterable[int]) -> List[str]:
        return [self.text(i) for i in ids]

    def source(self, sentence_id: int) -> str:
        rec = self.index[int(sentence_id)]
        return f"{self.files[int(rec['file'])]}:{int(rec['line'])}"

    def texts_range(self, start: int, stop: int) -> List[str]:
        """Texts of ids ``[start, stop)``, read with one read per file segment."""
        recs = np.asarray(self.index[start:stop])
        out: List[str] = []
        i = 0
        while i < len(recs):
            file_no = int(recs[i]["file"])
            j = i
            while j < len(recs) and int(recs[j]["file"]) == file_no:
                j += 1
            first = int(recs[i]["offset"])
            last = int(recs[j - 1]["offset"]) + int(recs[j - 1]["length"])
            handle = self._handle(file_no)
            handle.seek(first)
            blob = handle.read(last - first)
            offsets = recs[i:j]["offset"].astype(np.int64) - first
            lengths = recs[i:j]["length"].astype(np.int64)
            out.extend(blob[o : o + n].decode("utf-8") for o, n in zip(offsets, lengths))
            i = j
        return out

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()


def read_json(path: str, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as handle:
        return json.load(handle)
