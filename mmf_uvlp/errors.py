"""The package's error types, each a one-line message naming what is wrong and where.

Bad input (a file a user or a data set hands the package):

- :class:`FormatError` (a ``ValueError``): a malformed record, naming the file, the line or
  key, the field, what was expected and what was found; the format readers raise it and
  :class:`~mmf_uvlp.utils.error_policy.ErrorPolicy` raises or counts it;
- :class:`UnsafeFileError`: a file refused because loading it could run code;
- :class:`OutsideFolderError`: a name from a data file that leads outside its folder;
- :class:`EmptyInputError`: no usable item left of an input;
- :class:`LmdbOpenError`: a features path that is no readable LMDB environment;
- :class:`LogFormatError`: a ``train.log`` that cannot be read as one run's.

What a user wrote or asked for:

- :class:`UserConfigError`: a config key or command-line value that cannot work;
  ``mmf_run`` prints it as ``mmf_run: error: <message>`` and exits with status 2;
- :class:`UnsafeOutputPath`: a path a tool would delete or write outside its own output;
- :class:`RunFolderBusy`: a run folder another live process owns.

A run that cannot go on, :class:`RunStopped` and its kinds (:class:`DamagedCheckpoint`,
:class:`RefusedCheckpoint`, :class:`CheckpointWriteError`): ``mmf_run`` prints it as
``mmf_run: error: <message>`` and exits with status 1 (see ``one_line_user_errors`` in
``mmf_uvlp/compat``). The message names what stopped the run (the file, the update, the
samples) and what was expected.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Optional, Sequence


class FormatError(ValueError):
    """A malformed record: names the file, where in it, the field and what was expected."""

    def __init__(
        self,
        path: str | os.PathLike,
        field: str,
        expected: str,
        got: object = None,
        line: int | None = None,
        key: str | None = None,
    ):
        self.path, self.field, self.expected, self.got = str(path), field, expected, got
        self.line, self.key = line, key
        where = self.path
        if line is not None:
            where += f":{line}"
        if key is not None:
            where += f" [key {key!r}]"
        message = f"{where}: field {field!r}: expected {expected}"
        if got is not None:
            text = repr(got)
            message += f", got {text[:80] + '...' if len(text) > 80 else text}"
        super().__init__(message)


class UnsafeFileError(FormatError):
    """A file refused because loading it would import ``refused`` (and could run code)."""

    def __init__(
        self,
        path: str | os.PathLike,
        refused: str,
        allowed: str,
        key: Optional[str] = None,
        trust_hint: str = "",
    ):
        super().__init__(path, "pickle", allowed, refused, key=key)
        self.refused, self.allowed, self.trust_hint = refused, allowed, trust_hint
        where = str(path) + (f" [key {key!r}]" if key is not None else "")
        message = (
            f"{where}: refused to load: it names {refused!r}, which a pickle calls to "
            f"build an object (it could run any code); only {allowed} are loaded"
        )
        if trust_hint:
            message += f". If you trust this file and its origin, {trust_hint}"
        self.args = (message,)

    def __str__(self) -> str:
        return self.args[0]


class OutsideFolderError(ValueError):
    """A name from a data file that leads outside the folder it must stay in."""

    def __init__(self, folder: str | os.PathLike, name: str, reason: str):
        super().__init__(f"{name!r} leads outside {folder} (it {reason})")
        self.folder, self.name, self.reason = str(folder), name, reason


class EmptyInputError(ValueError):
    """No usable item is left of an input (every row empty, bad or dropped)."""


class LmdbOpenError(OSError):
    """A features path that is not a readable LMDB environment."""


class LogFormatError(ValueError):
    """A ``train.log`` whose values cannot be read as one run's: damaged, or two runs."""


class UserConfigError(ValueError):
    """A config key or command-line value that cannot work; the message says how to fix it."""


class UnsafeOutputPath(ValueError):
    """A path a tool would delete or write that is not its own file inside its folder."""


class RunFolderBusy(RuntimeError):
    """Another live process owns the folder (or its lock cannot be read)."""


class RunStopped(RuntimeError):
    """Training stopped: bad data, a full disk, a checkpoint that cannot be used."""


class DamagedCheckpoint(RunStopped):
    """A checkpoint file that cannot be read (truncated by a crash, or not a checkpoint)."""

    def __init__(self, path: str, reason: str):
        super().__init__(
            f"checkpoint {path} cannot be read ({reason}): the file is damaged or truncated"
        )
        self.path = path


class RefusedCheckpoint(RunStopped):
    """A checkpoint file holding objects that loading would have to run as code;
    ``trust_hint``: how the user opts in to loading it anyway, where one exists."""

    def __init__(self, path: str, refused: Sequence[str], trust_hint: str = ""):
        super().__init__(
            f"checkpoint {path} refused: it holds objects that are not plain data "
            f"({', '.join(refused)}), which loading it would run as code; a checkpoint may hold "
            "only tensors, numpy arrays, numbers, strings and containers"
            + (f"; if you trust this file and its origin, {trust_hint}" if trust_hint else "")
        )
        self.path = path
        self.refused = list(refused)


def _free_space(path: str) -> str:
    """The space left on the disk of ``path``'s folder, in words."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return f"free space of {folder} unknown"
    return f"{free / 2**20:.1f} MiB free in {folder}"


class LmdbWriteError(OSError):
    """An LMDB that could not be written (a full disk, an I/O error): names the file."""

    def __init__(self, folder: str, error: Exception):
        path = os.path.join(folder, "data.mdb")
        super().__init__(
            f"cannot write {path}: {error} ({_free_space(path)}); free space "
            "(or write elsewhere) and run the same command again"
        )
        self.path = path


class CheckpointWriteError(RunStopped):
    """A checkpoint that could not be written (the disk is full, the folder is read-only)."""

    def __init__(self, path: str, error: OSError):
        code = errno.errorcode.get(error.errno or 0, "no error code")
        reason = error.strerror or str(error)
        hint = (
            f"; the disk is full ({_free_space(path)}): free space, then resume with "
            "checkpoint.resume=True from the checkpoints written before, which are complete"
            if error.errno == errno.ENOSPC
            else ""
        )
        super().__init__(f"cannot write checkpoint {path}: {code} ({reason}){hint}")
        self.path = path
        self.errno = error.errno
