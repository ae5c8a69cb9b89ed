"""Running a study's steps: what is done is skipped, the rest runs one command at a time.

Before each command: ``[i/n] title | elapsed | ETA``, the ETA from the mean wall time of
each kind of step (pre-training, fine-tuning, ...), measured in this session or recorded by
earlier ones. When a command finishes, its ``step.json`` records the command and its wall
time, and the checkpoints no later step reads are deleted (``Step.prune``). A finished step
whose recorded command differs from the planned one (other updates, seeds of another
world, ...) is an error rather than a silent mix of settings.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import Callable, Sequence

from mmf_uvlp.replication.steps import Step
from mmf_uvlp.replication.study import REPO

Execute = Callable[[Sequence[str]], int]
Log = Callable[[str], None]


class StepFailed(RuntimeError):
    """A command failed, or cannot run."""


class StaleRun(RuntimeError):
    """A finished run was made by another command than the study now plans."""


def execute(command: Sequence[str]) -> int:
    """Run a command from the repository root, its output on the terminal."""
    return subprocess.run(list(command), cwd=REPO).returncode


def read_record(step: Step) -> dict | None:
    """The ``step.json`` of a finished step (None when it has none)."""
    if not step.record.exists():
        return None
    try:
        return json.loads(step.record.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{step.record}:{e.lineno}: not valid json ({e.msg}); delete it "
                         "and the step is taken as finished without a wall time") from None


def _check_record(step: Step, record: dict | None) -> None:
    if record is None or list(record.get("command", [])[1:]) == list(step.command[1:]):
        return
    recorded, planned = record["command"][1:], list(step.command[1:])
    now = [a for a in planned if a not in recorded]
    then = [a for a in recorded if a not in planned]
    raise StaleRun(f"{step.title}: {step.folder} was run with another command ({then} where "
                   f"the study now has {now}, see {step.record}); use another --runs folder, "
                   "or delete that folder to run it again with the current settings")


def clock(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Elapsed time of this session and the ETA of the steps left."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.durations: dict[str, list[float]] = defaultdict(list)

    def add(self, kind: str, seconds: float) -> None:
        self.durations[kind].append(seconds)

    def eta(self, left: Sequence[Step]) -> str:
        known = [statistics.fmean(self.durations[s.kind]) for s in left if self.durations[s.kind]]
        unknown = len(left) - len(known)
        if not known:
            return "ETA unknown (no step of these kinds timed yet)" if left else "ETA 0:00:00"
        text = f"ETA {clock(sum(known))}"
        return text + (f" + {unknown} steps not timed yet" if unknown else "")

    def line(self, index: int, total: int, step: Step, left: Sequence[Step]) -> str:
        elapsed = clock(time.perf_counter() - self.start)
        return (f"[{index}/{total}] {step.title} | elapsed {elapsed} | {self.eta(left)} "
                f"| steps left: {len(left)}")


def _prune(step: Step) -> None:
    for path in step.prune:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def run_steps(steps: Sequence[Step], run: Execute = execute, log: Log = print) -> int:
    """Run the steps not done yet, in order; returns how many commands ran."""
    progress = Progress()
    done = [step.done() for step in steps]
    for step, finished in zip(steps, done):
        record = read_record(step) if finished else None
        if record and record.get("wall_s") is not None:
            progress.add(step.kind, float(record["wall_s"]))
    ran = 0
    for index, step in enumerate(steps, start=1):
        if done[index - 1]:
            _check_record(step, read_record(step))
            log(f"[{index}/{len(steps)}] {step.title}: already done ({step.proof})")
            _prune(step)
            continue
        if step.needs is not None and not step.needs.exists():
            raise StepFailed(f"{step.title} reads {step.needs}, which is gone (deleted once its "
                             f"evaluation finished); delete {step.needs.parent} to run that "
                             "fine-tuning again")
        left = [s for s, d in zip(steps[index:], done[index:]) if not d]
        log(f"\n=== {progress.line(index, len(steps), step, [step, *left])}\n"
            f"$ {' '.join(step.command)}")
        start = time.perf_counter()
        code = run(step.command)
        wall = time.perf_counter() - start
        if code != 0:
            raise StepFailed(f"{step.title} failed (exit code {code}) after {clock(wall)}: "
                             f"{' '.join(step.command)}\nrun the study again to resume it")
        if not step.done():
            raise StepFailed(f"{step.title}: the command ended without error but its output "
                             f"is missing ({step.proof})")
        step.record.parent.mkdir(parents=True, exist_ok=True)
        step.record.write_text(json.dumps({
            "title": step.title, "command": list(step.command), "wall_s": round(wall, 3),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }, indent=1) + "\n", encoding="utf-8")
        _prune(step)
        progress.add(step.kind, wall)
        ran += 1
        log(f"=== [{index}/{len(steps)}] {step.title}: done in {clock(wall)}")
    return ran
