"""Files written whole or not at all: written under a temporary name beside the target, then
moved onto it with ``os.replace`` (atomic on one file system), so a file that exists is
complete, even after a crash or a kill.

- :func:`atomic_path`: a temporary name to hand a writer that takes a path
  (``faiss.write_index``, ``np.savez``, ``fig.savefig``, ``shutil.copyfile``);
- :func:`atomic_open`: a file object to write a stream to;
- :func:`atomic_write_bytes`, :func:`atomic_write_text`, :func:`atomic_write_json`: a whole
  small file at once.

The temporary name is ``<target>.tmp.<pid>`` (``extension`` appended where a writer reads
the format from the name); ``temporary`` names another where a reader or a cleanup looks
for it. When the block fails, the temporary file is removed and the target is left as it
was. ``fsync=True`` flushes the file to the disk before the move, so that the move never
publishes a file whose data a power loss could still take: the default for the whole-file
writes, an opt-in for the streams and paths (large work files a rerun rewrites).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import IO, Any, Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


def temporary_name(path: PathLike, extension: str = "") -> str:
    """``<path>.tmp.<pid><extension>``: beside ``path``, one per process."""
    return f"{os.fspath(path)}.tmp.{os.getpid()}{extension}"


def _fsync(path: str) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_path(
    path: PathLike, extension: str = "", temporary: Optional[PathLike] = None, fsync: bool = False
) -> Iterator[str]:
    """A temporary name to write ``path``'s contents to; moved onto ``path`` when the block
    ends without an error, removed when it fails."""
    name = os.fspath(temporary) if temporary is not None else temporary_name(path, extension)
    try:
        yield name
        if fsync:
            _fsync(name)
        os.replace(name, path)
    finally:
        if os.path.lexists(name):
            os.remove(name)


@contextlib.contextmanager
def atomic_open(
    path: PathLike,
    mode: str = "wb",
    extension: str = "",
    temporary: Optional[PathLike] = None,
    fsync: bool = False,
    **open_kwargs: Any,
) -> Iterator[IO]:
    """A file object (``open(..., mode, **open_kwargs)``) whose contents become ``path``
    when the block ends without an error."""
    with atomic_path(path, extension, temporary) as name:
        with open(name, mode, **open_kwargs) as handle:
            yield handle
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())


def atomic_write_bytes(
    path: PathLike, data: bytes, fsync: bool = True, temporary: Optional[PathLike] = None
) -> None:
    """``data`` as the file ``path``, whole or not at all."""
    with atomic_open(path, "wb", temporary=temporary, fsync=fsync) as handle:
        handle.write(data)


def atomic_write_text(
    path: PathLike,
    text: str,
    fsync: bool = True,
    temporary: Optional[PathLike] = None,
    encoding: str = "utf-8",
) -> None:
    """``text`` as the file ``path`` (``encoding``, newlines as given), whole or not at all."""
    atomic_write_bytes(path, text.encode(encoding), fsync, temporary)


def atomic_write_json(
    path: PathLike,
    data: Any,
    fsync: bool = True,
    temporary: Optional[PathLike] = None,
    indent: int = 1,
    sort_keys: bool = True,
) -> None:
    """``data`` as a json file ``path`` (``indent``, ``sort_keys``, a final newline)."""
    atomic_write_text(
        path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n", fsync, temporary
    )
