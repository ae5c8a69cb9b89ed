"""A study's commands as submitit jobs (Slurm, or processes on this computer).

``JobRun`` is an ``Execute`` for ``runner.run_steps``: each command becomes one job, submitted
when ``run_steps`` starts the step (after its prerequisites), and waited for in the runner's
thread; ``run_steps`` records, prunes and archives the step as it does for the local pool, and
``jobs`` bounds the jobs in flight. A job runs the command from the repository root with the
launcher's environment (``OMP_NUM_THREADS`` included) and returns its exit status; its output
goes to the step's ``step.out`` (several jobs at once) or, for one job at a time, is copied to
the terminal as it comes.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from mmf_uvlp.utils.cluster import JobOptions

Log = Callable[[str], None]
logger = logging.getLogger(__name__)


def run_command(command: Sequence[str], cwd: str, output: Optional[str] = None) -> int:
    """In the job: run ``command`` from ``cwd``; its output to ``output`` or to the job's log."""
    if output is None:
        return subprocess.run(list(command), cwd=cwd).returncode
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    with open(output, "w", encoding="utf-8") as out:
        return subprocess.run(
            list(command), cwd=cwd, stdout=out, stderr=subprocess.STDOUT
        ).returncode


class JobRun:
    """Run each command as a submitit job under ``folder`` (see the module docstring)."""

    def __init__(
        self,
        options: JobOptions,
        folder: Path,
        cwd: Path,
        log: Log = logger.info,
        poll_s: float = 5.0,
    ) -> None:
        self.executor = options.executor_for(folder, "uvlp-study")
        self.cwd = str(cwd)
        self.log = log
        self.poll_s = poll_s
        self._lock = threading.Lock()  # run_steps calls from several threads

    def __call__(self, command: Sequence[str], output: Optional[Path] = None) -> int:
        with self._lock:
            job = self.executor.submit(
                run_command, list(command), self.cwd, None if output is None else str(output)
            )
        log_path = Path(str(job.paths.stdout).replace("%j", str(job.job_id)))
        self.log(f"    job {job.job_id}, log {log_path}")
        shown = 0
        while not job.done():
            if output is None:
                shown = self._echo(log_path, shown)
            time.sleep(self.poll_s)
        if output is None:
            self._echo(log_path, shown)
        try:
            return int(job.result())
        except Exception as exc:  # the job did not return: killed, timed out, cancelled
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            self.log(
                f"    job {job.job_id} failed: {lines[-1] if lines else exc!r} (log {log_path})"
            )
            return 1

    @staticmethod
    def _echo(path: Path, shown: int) -> int:
        """Copy the lines the job's log gained since ``shown`` bytes to the terminal, but
        submitit's own (``submitit INFO ...``)."""
        if not path.exists():
            return shown
        with open(path, "rb") as handle:
            handle.seek(shown)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]
        lines = [
            line
            for line in complete.decode("utf-8", errors="replace").splitlines(True)
            if not line.startswith("submitit ")
        ]
        if lines:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
        return shown + len(complete)
