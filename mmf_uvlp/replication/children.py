"""The runner's commands as child processes: each in a process group of its own, stopped
with the runner.

A command (``mmf_run``, a tool) starts in a process group of its own, so that the signal
meant for the runner is forwarded to the whole command: its DataLoader workers and spawned
ranks too. It stays in the runner's session: on Linux a new session is a new scheduling
group (autogroup), which takes an equal share of the processors whatever the runner's
``nice``, so ``nice -n 19 replicate.py`` would not leave the rest of the machine to other
work. Its standard input is empty: a command of a background process group that read the
terminal would be stopped. While :func:`forwarding_signals` is active, SIGTERM or SIGINT to the
runner goes to every running command's process group, no new command starts, and the runner
waits for the running ones to end (a second signal sends SIGKILL). When a command ends, what
is left of its process group is killed. Nothing keeps running after the runner: a rerun finds
no orphan writing into a run folder, and resumes from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Python 3.10's Popen has no process_group; a new session is the nearest it offers.
OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


class Interrupted(RuntimeError):
    """The runner was stopped by a signal (its running commands stopped with it)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


class Children:
    """The running commands, and the signal that stopped the runner (None while none did)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.signum: Optional[int] = None

    def run(
        self,
        command: Sequence[str],
        cwd: Path,
        output: Optional[Path] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> int:
        """Run ``command`` in a process group of its own (``env``: its environment, default
        this process's); its exit status (-N: signal N). Refused once the runner was stopped."""
        with contextlib.ExitStack() as stack:
            stdout = (
                None if output is None else stack.enter_context(open(output, "w", encoding="utf-8"))
            )
            with self._lock:
                if self.signum is not None:
                    return -self.signum
                process = subprocess.Popen(
                    list(command),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=None if output is None else subprocess.STDOUT,
                    env=None if env is None else dict(env),
                    **OWN_GROUP,
                )
                self._running.add(process)
            try:
                return process.wait()
            finally:
                _signal_group(process, signal.SIGKILL)  # what is left of it
                with self._lock:
                    self._running.discard(process)

    def stop(self, signum: int) -> None:
        """Send ``signum`` to every running command's process group (the first signal is
        remembered: no command starts after it)."""
        with self._lock:
            if self.signum is None:
                self.signum = signum
            running = list(self._running)
        for process in running:
            _signal_group(process, signum)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to ``process``'s group, if any member is left. Once the command ended,
    SIGKILL to its group ends a worker that ignored or swallowed the stop signal (a Python
    worker still starting turns SIGINT into an exception it may drop), which would otherwise
    outlive the runner; the group's id stays reserved while any member lives, so it names no
    other process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


CHILDREN = Children()


@contextlib.contextmanager
def forwarding_signals(children: Children = CHILDREN) -> Iterator[Children]:
    """While active (in the main thread), SIGTERM / SIGINT stop ``children`` (the first
    signal is forwarded as it is, a second as SIGKILL) instead of ending this process
    at once; the caller sees ``children.signum`` and waits for the running ones."""
    children.signum = None
    if threading.current_thread() is not threading.main_thread():
        yield children
        return

    def handler(signum: int, frame: object) -> None:
        children.stop(signal.SIGKILL if children.signum is not None else signum)

    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    try:
        yield children
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)
