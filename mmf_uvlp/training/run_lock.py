"""One process at a time owns a run folder: ``run.lock`` with the owner's pid and host.

MMF writes a run's checkpoints and appends its ``train.log`` in ``env.save_dir`` without
checking whether another run writes there: two ``mmf_run`` into one folder both exit 0, the
first run's weights are overwritten and the two logs interleave. With the plugin, ``mmf_run``
(and ``mmf_predict``) take the folder's lock before MMF starts: a second run into the folder
stops with one line naming the owner::

    mmf_run: error: run folder save/ is in use by pid 4242 on host gpu-07 (mmf_run
    config=..., started 2026-01-02T10:00:00+00:00); its lock is save/run.lock ...

The lock file is created atomically (written under a temporary name, then hard-linked to
``run.lock``, which fails when it exists), so it always holds a complete record::

    {"pid": 4242, "host": "gpu-07", "process": "<boot id>:<start time>",
     "started": "2026-01-02T10:00:00+00:00", "command": ["mmf_run", "config=..."]}

It is removed when the run ends, by an error too. A lock left by a killed run is *stale*
when its host is this host and its process is gone (no such pid, or a pid reused by another
process: ``process`` is the kernel's start time of the pid); a stale lock is taken over
with a warning. A lock of another host cannot be checked from here: the message says so,
and to delete the file if that run is over.

In a distributed run, the process of rank 0 holds the lock (the others share its folder).
The replication runner holds such a lock for its runs folder as well (one per seed, so that
processes that each take some seeds can share a folder).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from mmf_uvlp.errors import RunFolderBusy

LOCK_FILE = "run.lock"
logger = logging.getLogger(__name__)


def _process_identity(pid: int) -> Optional[str]:
    """``<boot id>:<start time>`` of a process (Linux), None where it cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return f"{boot}:{fields[19]}"  # field 22 of stat, starttime


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@dataclass(frozen=True)
class Owner:
    """The process named by a lock file."""

    pid: int
    host: str
    process: Optional[str]
    started: str
    command: Sequence[str]

    @classmethod
    def this_process(cls) -> "Owner":
        return cls(
            os.getpid(),
            socket.gethostname(),
            _process_identity(os.getpid()),
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            list(sys.argv),
        )

    @classmethod
    def read(cls, path: Path) -> Optional["Owner"]:
        """The owner a lock file names; None when the file is gone."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            return cls(
                int(data["pid"]),
                str(data["host"]),
                data.get("process"),
                str(data.get("started", "?")),
                list(data.get("command", [])),
            )
        except (ValueError, KeyError, TypeError):
            raise RunFolderBusy(
                f"{path} is not a run lock (expected a JSON object with 'pid' and 'host'); "
                "delete it if no run uses its folder"
            ) from None

    def to_json(self) -> str:
        return json.dumps(
            {
                "pid": self.pid,
                "host": self.host,
                "process": self.process,
                "started": self.started,
                "command": list(self.command),
            }
        )

    def stale(self) -> bool:
        """Whether the owner is known to be gone: a process of this host that has ended."""
        if self.host != socket.gethostname():
            return False
        if not _alive(self.pid):
            return True
        now = _process_identity(self.pid)
        return self.process is not None and now is not None and now != self.process

    def describe(self) -> str:
        command = " ".join([Path(self.command[0]).name, *self.command[1:]]) if self.command else "?"
        return f"pid {self.pid} on host {self.host} ({command}, started {self.started})"


@contextlib.contextmanager
def _guard(folder: Path) -> Iterator[None]:
    """Excludes other processes of this host from the read-decide-write of a lock (an
    ``flock`` of the folder; skipped where the file system has none)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


class RunLock:
    """The lock of ``folder`` (``folder/name``); ``what`` names the folder in messages."""

    def __init__(
        self, folder: str | os.PathLike, what: str = "run folder", name: str = LOCK_FILE
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = what
        self.owner: Optional[Owner] = None

    def _create(self, owner: Owner) -> bool:
        """Write ``owner`` as the lock, atomically; False when a lock exists."""
        temporary = self.path.with_name(f".{self.path.name}.{owner.pid}.tmp")
        temporary.write_text(owner.to_json() + "\n", encoding="utf-8")
        try:
            os.link(temporary, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)

    def acquire(self) -> None:
        """Own the folder (created if missing), or raise :class:`RunFolderBusy` naming the
        owner. A stale lock is taken over."""
        self.folder.mkdir(parents=True, exist_ok=True)
        me = Owner.this_process()
        with _guard(self.folder):
            for _ in range(3):
                if self._create(me):
                    self.owner = me
                    return
                owner = Owner.read(self.path)
                if owner is None:  # released meanwhile
                    continue
                if not owner.stale():
                    raise RunFolderBusy(self._busy(owner))
                logger.warning(
                    "%s: taking over the lock of %s, which has ended", self.path, owner.describe()
                )
                self.path.unlink(missing_ok=True)
        raise RunFolderBusy(
            f"{self.path}: could not take the lock (other processes keep taking it)"
        )

    def _busy(self, owner: Owner) -> str:
        where = (
            ""
            if owner.host == socket.gethostname()
            else ("; that host cannot be checked from here: if that run is over, delete the lock")
        )
        return (
            f"{self.what} {self.folder} is in use by {owner.describe()}; its lock is "
            f"{self.path}{where}; wait for it to end, or use another folder"
        )

    def release(self) -> None:
        """Remove the lock if this process still owns it."""
        if self.owner is None:
            return
        with _guard(self.folder):
            try:
                current = Owner.read(self.path)
            except RunFolderBusy:
                current = None
            if current is not None and (current.pid, current.host, current.process) == (
                self.owner.pid,
                self.owner.host,
                self.owner.process,
            ):
                self.path.unlink(missing_ok=True)
        self.owner = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
