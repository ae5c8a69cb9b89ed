"""One process at a time owns a run folder: ``run.lock``, filelock's marker of its owner.

MMF writes a run's checkpoints and appends its ``train.log`` in ``env.save_dir`` without
checking whether another run writes there: two ``mmf_run`` into one folder both exit 0, the
first run's weights are overwritten and the two logs interleave. With the plugin, ``mmf_run``
(and ``mmf_predict``) take the folder's lock before MMF starts: a second run into the folder
stops with one line naming the owner::

    mmf_run: error: run folder save/ is in use by pid 4242 on host gpu-07 (mmf_run
    config=..., since 2026-01-02T10:00:00+00:00); its lock is save/run.lock ...

The lock is ``filelock``'s ``MarkerSoftFileLock``: a file created exclusively, holding the
owner's pid, host and process start time, removed when the run ends, by an error too. A
lock left by a killed run is *stale* when its host is this host and its process is gone (no
such pid, or a pid reused by another process); filelock takes a stale lock over, and the
plugin says so in a warning. A lock of another host cannot be checked from here: the message
says so, and to delete the file if that run is over.

In a distributed run, the process of rank 0 holds the lock (the others share its folder).
The replication runner holds such a lock for its runs folder as well (one per seed, so that
processes that each take some seeds can share a folder).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from filelock import MarkerSoftFileLock, OwnerRecord, Timeout

from mmf_uvlp.errors import RunFolderBusy

LOCK_FILE = "run.lock"
COMMAND_SHOWN = 200  # characters of the owner's command line a message shows
logger = logging.getLogger(__name__)


def _command_of(pid: int) -> Optional[str]:
    """The command line of process ``pid`` of this host (Linux) on one line, cut to
    :data:`COMMAND_SHOWN` characters; None where it cannot be read."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    words = [word for word in words if word]
    if not words:
        return None
    command = " ".join(" ".join([Path(words[0]).name, *words[1:]]).split())  # on one line
    return command if len(command) <= COMMAND_SHOWN else command[: COMMAND_SHOWN - 3] + "..."


class RunLock:
    """The lock of ``folder`` (``folder/name``); ``what`` names the folder in messages."""

    def __init__(
        self, folder: str | os.PathLike, what: str = "run folder", name: str = LOCK_FILE
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = what
        self._lock = MarkerSoftFileLock(str(self.path), blocking=False)

    @property
    def owner(self) -> Optional[OwnerRecord]:
        """The owner the lock file names; None when there is none (or it is no lock)."""
        return self._lock.owner

    def acquire(self) -> None:
        """Own the folder (created if missing), or raise :class:`RunFolderBusy` naming the
        owner. A stale lock is taken over."""
        self.folder.mkdir(parents=True, exist_ok=True)
        before = self.owner
        try:
            self._lock.acquire()
        except Timeout:
            raise RunFolderBusy(self._busy()) from None
        if before is not None:
            logger.warning(
                "%s: taking over the lock of pid %d on host %s, which has ended",
                self.path,
                before.pid,
                before.hostname,
            )

    def _describe(self, owner: OwnerRecord) -> str:
        """``pid N on host H (command, since T)``: the command where it can be read."""
        try:
            since = datetime.fromtimestamp(self.path.stat().st_mtime, timezone.utc)
            when = f"since {since.isoformat(timespec='seconds')}"
        except OSError:
            when = "since ?"
        command = _command_of(owner.pid) if owner.hostname == socket.gethostname() else None
        details = f"{command}, {when}" if command else when
        return f"pid {owner.pid} on host {owner.hostname} ({details})"

    def _busy(self) -> str:
        owner = self.owner
        if owner is None:
            return (
                f"{self.path} is not a run lock (expected filelock's owner record: "
                "filelock/2, pid=..., host=..., mode=...); delete it if no run uses its folder"
            )
        where = (
            ""
            if owner.hostname == socket.gethostname()
            else "; that host cannot be checked from here: if that run is over, delete the lock"
        )
        return (
            f"{self.what} {self.folder} is in use by {self._describe(owner)}; its lock is "
            f"{self.path}{where}; wait for it to end, or use another folder"
        )

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if self._lock.is_locked:
            self._lock.release()

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
