"""One LMDB environment per file and process, shared by every reader.

py-lmdb refuses to open an environment twice in one process, yet several readers
(two dataset splits, MMF's own feature reader beside ours) often read one file.
A path that is no LMDB (missing, a folder without ``data.mdb``, another kind of file)
raises :class:`LmdbOpenError` naming the path and what was expected; so does a truncated
data file (shorter than the last page its header records), which LMDB would otherwise
map and read past its end (the process dies with ``Bus error``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import lmdb

_OPEN: Dict[Tuple[int, str], List[Any]] = {}  # (pid, real path) -> [environment, users]

READ_ONLY = dict(readonly=True, lock=False, readahead=False, meminit=False)
EXPECTED = "an LMDB environment (a folder holding data.mdb, or an LMDB file)"


class LmdbOpenError(OSError):
    """A features path that is not a readable LMDB environment."""


def acquire(path: str, **kwargs: Any) -> lmdb.Environment:
    """The process's environment for ``path`` (opened read-only on first use)."""
    key = (os.getpid(), os.path.realpath(path))
    if key not in _OPEN:
        options = dict(READ_ONLY, subdir=os.path.isdir(path))
        options.update(kwargs)
        try:
            env = lmdb.open(path, **options)
        except lmdb.Error as e:
            raise LmdbOpenError(f"{path}: expected {EXPECTED}, found {_found(path, e)}") \
                from None
        if options.get("readonly"):
            try:
                _check_complete(path, env, bool(options["subdir"]))
            except LmdbOpenError:
                env.close()
                raise
        _OPEN[key] = [env, 0]
    _OPEN[key][1] += 1
    return _OPEN[key][0]


def _check_complete(path: str, env: lmdb.Environment, subdir: bool) -> None:
    """Refuse a data file that ends before the last page its header records."""
    data = os.path.join(path, "data.mdb") if subdir else path
    page_size, last_page = env.stat()["psize"], env.info()["last_pgno"]
    needed, size = (last_page + 1) * page_size, os.path.getsize(data)
    if size < needed:
        raise LmdbOpenError(
            f"{data}: truncated LMDB data file: {size} bytes, but its header says it holds "
            f"{last_page + 1} pages of {page_size} bytes ({needed} bytes); copy or write it again"
        )


def _found(path: str, error: lmdb.Error) -> str:
    if not os.path.exists(path):
        return "nothing at that path"
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "data.mdb")):
        return "a folder without data.mdb"
    return f"a file lmdb cannot open ({error})"


def release(path: str) -> None:
    """Drop one user of ``path``'s environment; the last one closes it."""
    key = (os.getpid(), os.path.realpath(path))
    entry = _OPEN.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        entry[0].close()
        del _OPEN[key]
