"""One LMDB environment per file and process, shared by every reader.

py-lmdb refuses to open an environment twice in one process, yet several readers
(two dataset splits, MMF's own feature reader beside ours) often read one file.
A path that is no LMDB (missing, a folder without ``data.mdb``, another kind of file)
raises :class:`LmdbOpenError` naming the path and what was expected; so does a truncated
data file (shorter than the last page its header records), which LMDB would otherwise
map and read past its end (the process dies with ``Bus error``).

DataLoader workers: LMDB forbids using an environment in a process forked after it was
opened, and an environment cannot be pickled (workers started with ``spawn`` or
``forkserver``). :class:`ProcessLocalEnvironment`, what MMF's feature readers get, opens
the environment of the process it is used in, so each worker reads through its own.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import lmdb

from mmf_uvlp.errors import LmdbOpenError

_OPEN: Dict[Tuple[int, str], List[Any]] = {}  # (pid, real path) -> [environment, users]

READ_ONLY = dict(readonly=True, lock=False, readahead=False, meminit=False)
EXPECTED = "an LMDB environment (a folder holding data.mdb, or an LMDB file)"


def acquire(path: str, **kwargs: Any) -> lmdb.Environment:
    """The process's environment for ``path`` (opened read-only on first use)."""
    key = (os.getpid(), os.path.realpath(path))
    if key not in _OPEN:
        _close_inherited(key[1])
        options = dict(READ_ONLY, subdir=os.path.isdir(path))
        options.update(kwargs)
        try:
            env = lmdb.open(path, **options)
        except lmdb.Error as e:
            raise LmdbOpenError(f"{path}: expected {EXPECTED}, found {_found(path, e)}") from None
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


def _close_inherited(real_path: str) -> None:
    """In a process forked while its parent had ``real_path`` open: close the copy of the
    parent's environment (LMDB forbids using it here, and py-lmdb refuses to open the file
    again while it is open; the parent's own stays open)."""
    for key in [key for key in _OPEN if key[1] == real_path and key[0] != os.getpid()]:
        _OPEN.pop(key)[0].close()


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


def opened_in(environment: Any) -> int:
    """The id of the process that opened ``environment`` (a handle: the one it now uses)."""
    if isinstance(environment, ProcessLocalEnvironment):
        environment = environment.environment()
    for (pid, _), (opened, _) in _OPEN.items():
        if opened is environment:
            return pid
    raise ValueError("not an environment opened through mmf_uvlp.utils.lmdb_envs")


class ProcessLocalEnvironment:
    """An LMDB environment by path: every call goes to the environment of the calling
    process (opened on first use there), so it survives ``fork`` and pickling."""

    def __init__(self, path: str, **kwargs: Any):
        self.path, self._kwargs = path, kwargs
        self._pid, self._environment = None, None
        self.environment()  # a bad path fails here, in the process that configured it

    def environment(self) -> lmdb.Environment:
        """This process's environment for the path."""
        if self._pid != os.getpid():
            self._environment, self._pid = acquire(self.path, **self._kwargs), os.getpid()
        return self._environment

    def __getattr__(self, item: str) -> Any:  # begin, stat, info, ... of lmdb.Environment
        if item.startswith("_"):  # not an environment's (e.g. looked up while unpickling)
            raise AttributeError(item)
        return getattr(self.environment(), item)

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "_kwargs": self._kwargs, "_pid": None, "_environment": None}
