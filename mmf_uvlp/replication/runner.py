"""Running a study's steps: what is done is skipped, the rest runs one or ``jobs`` at a time.

Before each command: ``[i/n] title | elapsed | ETA``, the ETA from the mean wall time of
each kind of step (pre-training, fine-tuning, ...), measured in this call or recorded by
earlier ones, divided by the number of jobs. With ``jobs > 1`` independent steps run side
by side (a fine-tuning waits for its system's pre-training, the RefCOCO+ split inference
for its fine-tuning, everything for the world and corpora) and each command's output goes
to ``<record>.out`` beside its ``step.json`` instead of the terminal. Of the steps ready to
start, an evaluation goes first (its checkpoint is pruned once it ran), then a step that
reads what a finished run of its system made (a fine-tuning whose pre-training is done: the
weights and the runs folder may not last, and a pre-training is worth its hours only with its
fine-tunings), then the one most later steps wait for (a pre-training before the
fine-tunings that need none: the longest chains start early), then the plan's order. When a
command finishes, its ``step.json`` records the command, its wall time, thread count and
what made it (commit, device, precision: ``provenance.made_by``, taken when it started), the
SHA-256 of the weights a pre-training wrote or a fine-tuning started from, and
the checkpoints no later step reads are deleted (``Step.prune``). A run stopped and resumed
from its checkpoint by a later call is one run made by several starts: its record lists
the stopped starts it continues (``interrupted``: when each started and last wrote, its wall
time and what made it) and its ``wall_s`` is the sum over all its starts. A finished step whose
recorded command differs from the planned one (other updates, seeds of another world, ...)
is an error rather than a silent mix of settings. A finished step made again for its output
(a pre-training whose weights are gone) writes a fresh log, and its val/test values are
compared with those of its previous run.

A run is done only with its record: ``step.json`` is written (to a temporary name, then
moved in place) after its command ended and its output was checked, so a runner stopped
between the two runs the step again (MMF resumes it from its last checkpoint) rather than
counting it done unrecorded. Before a command starts, ``step.started.json`` records it; a
run folder whose started command is not the planned one (a study re-planned with other
updates) is refused like a finished one, instead of resuming a run of other settings.
Commands run in process groups of their own (:mod:`~mmf_uvlp.replication.children`):
SIGTERM / SIGINT to the runner stop them, the runner waits for them and raises
:class:`~mmf_uvlp.replication.children.Interrupted`; no command outlives it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import statistics
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Collection, Mapping, Optional, Sequence

from mmf_uvlp.replication.children import CHILDREN, Interrupted, forwarding_signals
from mmf_uvlp.replication.provenance import (
    INTERRUPTED,
    WEIGHTS_MADE,
    WEIGHTS_READ,
    file_sha256,
    made_by,
)
from mmf_uvlp.replication.steps import Step
from mmf_uvlp.replication.study import REPO
from mmf_uvlp.replication.world import World
from mmf_uvlp.report.results import LOG_FILE, parse_log
from mmf_uvlp.utils.atomic import atomic_write_json

PREVIOUS_LOG = "train.previous.log"  # a finished run's log while the run is made again

Execute = Callable[..., int]  # (command) or, with jobs > 1, (command, output file)
Log = Callable[[str], None]
logger = logging.getLogger(__name__)


class StepFailed(RuntimeError):
    """A command failed, or cannot run."""


class StaleRun(RuntimeError):
    """A finished run was made by another command than the study now plans."""


class BadRecord(ValueError):
    """A step's record is not what the runner writes."""


def share_cores(jobs: int) -> None:
    """Give each of ``jobs`` runs side by side cpu_count / jobs threads (``OMP_NUM_THREADS``,
    unless already set), so that they do not oversubscribe the cores. The number is pinned
    even for one job and recorded in each ``step.json``: a run is bit-reproducible for a
    given thread count, and another count sums floats in another order."""
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))


def threads() -> Optional[int]:
    """The thread count the runs get (None when ``OMP_NUM_THREADS`` is unset or not a number)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else None


def execute(
    command: Sequence[str], output: Optional[Path] = None, env: Optional[Mapping[str, str]] = None
) -> int:
    """Run a command from the repository root in a process group of its own (stopped with
    the runner), its output on the terminal or in ``output``; ``env``: its environment
    (default: this process's)."""
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
    return CHILDREN.run(command, REPO, output, env=env)


def load_record(path: Path) -> dict:
    """A record the runner wrote (``step.json``, ``step.started.json``), checked: a JSON
    object with a ``command`` list of strings, ``wall_s`` a number or null and ``world``
    an object where they are given. Raises :class:`BadRecord` naming the file."""
    expected = (
        "expected a JSON object with a 'command' list of strings (the record the "
        "runner writes for a step)"
    )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BadRecord(
            f"{path}:{e.lineno}: not valid json ({e.msg}); {expected}; delete "
            "it to run the step again"
        ) from None
    if not isinstance(record, dict):
        raise BadRecord(
            f"{path}: {expected}, got a JSON {type(record).__name__}; delete it "
            "to run the step again"
        )
    command = record.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(arg, str) for arg in command)
    ):
        raise BadRecord(
            f"{path}: field 'command': {expected}, got {command!r}; delete it to run the step again"
        )
    wall = record.get("wall_s")
    if not _seconds(wall):
        raise BadRecord(
            f"{path}: field 'wall_s': expected seconds (a number) or null, got {wall!r}"
        )
    if record.get("world") is not None and not isinstance(record["world"], dict):
        raise BadRecord(
            f"{path}: field 'world': expected an object of world settings, got {record['world']!r}"
        )
    starts = record.get(INTERRUPTED, [])
    if not isinstance(starts, list) or not all(
        isinstance(start, dict) and _seconds(start.get("wall_s")) for start in starts
    ):
        raise BadRecord(
            f"{path}: field '{INTERRUPTED}': expected a list of the run's stopped "
            f"starts, each an object with 'wall_s' seconds or null, got {starts!r}"
        )
    return record


def _seconds(value: object) -> bool:
    """Whether a record's ``wall_s`` is seconds (a number) or null."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def read_record(step: Step) -> dict | None:
    """The ``step.json`` of a finished step (None when it has none)."""
    return load_record(step.record) if step.record.exists() else None


def started_path(step: Step) -> Path:
    """Where the command of a step's run in progress is recorded (``step.started.json``)."""
    return step.record.with_suffix(".started.json")


def read_started(step: Step) -> dict | None:
    """The record of a step's command started but not finished (None when there is none)."""
    path = started_path(step)
    return load_record(path) if path.exists() else None


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def interrupted_starts(step: Step) -> list[dict]:
    """The starts of ``step`` stopped before it finished whose work a start now continues
    (it resumes from their checkpoint), oldest first, as their ``step.started.json`` says:
    when each started, when it last wrote its log, output or checkpoint (``stopped``), its
    wall time between the two (work lost after its last checkpoint included) and what made
    it. Empty when the step starts from scratch."""
    started = read_started(step)
    if started is None or step.resumes_from is None or not step.resumes_from.exists():
        return []
    writes = [
        path.stat().st_mtime
        for path in (step.folder / LOG_FILE, step.resumes_from, step.record.with_suffix(".out"))
        if path.exists()
    ]
    try:
        began = datetime.fromisoformat(str(started.get("started"))).timestamp()
    except ValueError:
        began = None
    last = max(writes)
    start = {
        key: value
        for key, value in started.items()
        if key not in ("title", "command", "world", INTERRUPTED)
    }
    start.update(
        stopped=_utc(last), wall_s=None if began is None else round(max(0.0, last - began), 3)
    )
    return [*started.get(INTERRUPTED, []), start]


def _write_json(path: Path, data: dict) -> None:
    """``data`` as ``path``, whole or not at all (written aside, then moved in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        path,
        data,
        fsync=False,
        sort_keys=False,
        temporary=path.with_name(f".{path.name}.{os.getpid()}.tmp"),
    )


def stale_reason(step: Step, record: dict | None, source: Path | None = None) -> str | None:
    """Why a finished step's output is not what the step would make now (None when it is):
    its world was generated with other settings; its run was made on a world of other
    settings, or on one its record does not say (a record written before records kept
    them); or with another command. ``source``: the record's file (default ``step.json``;
    ``step.started.json`` for a run started and not finished)."""
    source = step.record if source is None else source
    made = "made" if source == step.record else "started, not finished,"
    reason = step.outdated() if step.outdated is not None else None
    if reason:
        return f"{step.title}: {reason}"
    made_on = None if record is None else record.get("world")
    if record is not None and step.world is not None and made_on is None:
        return (
            f"{step.title}: {source} does not say which world's settings its run "
            "was made on (written before records kept them), so it may be another "
            "world's run; delete that folder, and the step from the archive if one "
            "holds it, to run it again on this world"
        )
    changed = {} if made_on is None or step.world is None else World.changed(made_on, step.world)
    if changed:
        what = "; ".join(
            f"{k} {then} where the world now has {now}" for k, (then, now) in changed.items()
        )
        return (
            f"{step.title}: {step.folder} was {made} on a world with {what} (see "
            f"{source}); delete that folder, and the step from the archive if one "
            "holds it, to run it again on this world"
        )
    if record is None or list(record["command"][1:]) == list(step.command[1:]):
        return None
    recorded, planned = record["command"][1:], list(step.command[1:])
    now = [a for a in planned if a not in recorded]
    then = [a for a in recorded if a not in planned]
    ran = "was run" if source == step.record else "holds a run started, not finished,"
    return (
        f"{step.title}: {step.folder} {ran} with another command ({then} where "
        f"the study now has {now}, see {source}); use another --runs folder, "
        "or delete that folder to run it again with the current settings"
    )


def _check_record(step: Step, record: dict | None) -> None:
    reason = stale_reason(step, record)
    if reason:
        raise StaleRun(reason)


def _check_started(step: Step) -> None:
    """Refuse to resume a run whose folder was started by another command."""
    record = read_started(step)
    reason = None if record is None else stale_reason(step, record, started_path(step))
    if reason:
        raise StaleRun(reason)


def clock(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Elapsed time of this call and the ETA of the steps left."""

    def __init__(self, jobs: int = 1) -> None:
        self.start = time.perf_counter()
        self.jobs = jobs
        self.durations: dict[str, list[float]] = defaultdict(list)

    def add(self, kind: str, seconds: float) -> None:
        self.durations[kind].append(seconds)

    def eta(self, left: Sequence[Step]) -> str:
        known = [statistics.fmean(self.durations[s.kind]) for s in left if self.durations[s.kind]]
        unknown = len(left) - len(known)
        if not known:
            return "ETA unknown (no step of these kinds timed yet)" if left else "ETA 0:00:00"
        text = f"ETA {clock(sum(known) / self.jobs)}"
        return text + (f" + {unknown} steps not timed yet" if unknown else "")

    def line(self, index: int, total: int, step: Step, left: Sequence[Step]) -> str:
        elapsed = clock(time.perf_counter() - self.start)
        return (
            f"[{index}/{total}] {step.title} | elapsed {elapsed} | {self.eta(left)} "
            f"| steps left: {len(left)}"
        )


def _prune(step: Step) -> None:
    for path in step.prune:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def set_aside_previous_log(step: Step) -> None:
    """Before a step that finished once runs again for its output (a pre-training whose
    weights are gone, its record restored from an archive): its log goes to
    ``train.previous.log``, so that the new run (MMF appends) writes a log of its own, which
    :func:`compare_with_previous` checks against it. A run resuming from its checkpoint
    keeps the log it is writing; one restarted from scratch drops its partial log."""
    log, previous = step.folder / LOG_FILE, step.folder / PREVIOUS_LOG
    if not step.record.exists() or not log.exists():
        return
    if step.resumes_from is not None and step.resumes_from.exists():
        return
    if previous.exists():
        log.unlink()
    else:
        log.rename(previous)


def compare_with_previous(step: Step) -> str | None:
    """Whether a step made again logged the val/test values of its previous run (None when
    it had none): a seeded command gives the same numbers, or the study has a problem."""
    previous = step.folder / PREVIOUS_LOG
    if not previous.exists():
        return None
    old, new = parse_log(previous), parse_log(step.folder / LOG_FILE)
    previous.unlink()
    keys = old.keys() | new.keys()
    changed = sorted(key for key in keys if old.get(key) != new.get(key))
    if not changed:
        return f"{step.title}: made again, the same {len(new)} val/test values as its previous run"
    return (
        f"{step.title}: made again, and {len(changed)} of {len(keys)} "
        "val/test values differ from its previous run: "
        + ", ".join(f"{key} {old.get(key)} -> {new.get(key)}" for key in changed)
    )


def prerequisites(steps: Sequence[Step]) -> list[set[int]]:
    """For each step, the indices of the steps it must wait for: every setup step (world,
    corpora) before it; a fine-tuning its system's pre-training of the same seed; the
    RefCOCO+ split inference that seed's RefCOCO+ fine-tuning."""
    setup: list[int] = []
    needs: list[set[int]] = []
    for index, step in enumerate(steps):
        wanted = set(setup)
        if step.system is None:
            setup.append(index)
        else:
            wanted |= {
                j
                for j, other in enumerate(steps[:index])
                if (other.system, other.seed) == (step.system, step.seed)
                and (
                    other.kind == "pretrain"
                    or (step.kind == "evaluate" and other.task == "refcoco_plus")
                )
            }
        needs.append(wanted)
    return needs


def waiting_on(needs: Sequence[set[int]]) -> list[int]:
    """For each step, how many steps wait for it, directly or through other steps."""
    later: list[set[int]] = [set() for _ in needs]
    for index in reversed(range(len(needs))):
        for j in needs[index]:
            later[j] |= {index} | later[index]
    return [len(waiting) for waiting in later]


def spent(steps: Sequence[Step], done: Sequence[bool]) -> list[bool]:
    """For each step, whether it is not done but need not run: it finished once (it has a
    record) and every step that reads its output is done, e.g. a pre-training whose weights
    are gone (a study restored from an archive) while its fine-tunings all finished. The
    world is always needed: the trivial rates are read from it."""
    needs, done = prerequisites(steps), list(done)
    used = [False] * len(steps)
    for i in reversed(range(len(steps))):
        later = [j for j, wanted in enumerate(needs) if i in wanted]
        if (
            not done[i]
            and steps[i].kind != "world"
            and later
            and all(done[j] for j in later)
            and read_record(steps[i]) is not None
        ):
            done[i] = used[i] = True
    return used


def run_steps(
    steps: Sequence[Step],
    run: Execute = execute,
    log: Log = logger.info,
    jobs: int = 1,
    on_done: Callable[[Step], object] | None = None,
    kinds: Collection[str] | None = None,
) -> int:
    """Run the steps not done yet, ``jobs`` at a time, each after its prerequisites;
    returns how many commands ran. ``on_done`` is called with each step done, before or
    by this call (e.g. to archive it). With ``kinds``, only steps of those kinds run; the
    finished ones of every kind are still checked against their records. On a failure no
    new step starts; the running ones finish (and are recorded) before the error is
    raised."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    progress = Progress(jobs)
    done = [step.done() for step in steps]
    for step, finished in zip(steps, done):
        record = read_record(step) if finished else None
        if record and record.get("wall_s") is not None:
            progress.add(step.kind, float(record["wall_s"]))
    total = len(steps)
    for index, (step, unneeded) in enumerate(zip(steps, spent(steps, done)), start=1):
        if done[index - 1]:
            _check_record(step, read_record(step))
            log(f"[{index}/{total}] {step.title}: already done ({step.proof})")
            started_path(step).unlink(missing_ok=True)  # a runner stopped right after the record
            _prune(step)
        elif unneeded:
            _check_record(step, read_record(step))
            log(
                f"[{index}/{total}] {step.title}: finished earlier ({step.record}); every "
                "step that reads its output is done"
            )
            done[index - 1] = True
        if done[index - 1] and on_done is not None:
            on_done(step)
    needs = prerequisites(steps)
    weight = waiting_on(needs)
    chained = [any(steps[j].system is not None for j in wanted) for wanted in needs]
    pending = [
        i
        for i, finished in enumerate(done)
        if not finished and (kinds is None or steps[i].kind in kinds)
    ]
    for i in pending:
        _check_started(steps[i])
    running: dict[Future, tuple[int, float]] = {}
    failures: list[str] = []
    made: dict[int, dict] = {}  # what makes each running step (provenance.made_by)
    stopped: list[str] = []
    ran = 0

    def start(pool: ThreadPoolExecutor, i: int) -> None:
        step = steps[i]
        if step.needs is not None and not step.needs.exists():
            raise StepFailed(
                f"{step.title} reads {step.needs}, which is gone (deleted once "
                f"its evaluation finished); delete {step.needs.parent} to run "
                "that fine-tuning again"
            )
        left = [steps[j] for j in pending]
        where = f"\n    output: {step.record.with_suffix('.out')}" if jobs > 1 else ""
        log(
            f"\n=== {progress.line(i + 1, total, step, [step, *left])}\n"
            f"$ {' '.join(step.command)}{where}"
        )
        set_aside_previous_log(step)
        made[i] = {**made_by(step.command), **weights_read(step, [steps[j] for j in needs[i]])}
        stopped_starts = interrupted_starts(step)
        if stopped_starts:  # the run goes on from its checkpoint, not from the weights now
            made[i][INTERRUPTED] = stopped_starts
            if WEIGHTS_READ in stopped_starts[0]:
                made[i][WEIGHTS_READ] = stopped_starts[0][WEIGHTS_READ]
        _write_json(started_path(step), _record_of(step, made=made[i]))
        args = (step.command,) if jobs == 1 else (step.command, step.record.with_suffix(".out"))
        running[pool.submit(run, *args)] = (i, time.perf_counter())

    with forwarding_signals() as children, ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            while not failures and children.signum is None and len(running) < jobs:
                candidates = [i for i in pending if all(done[j] for j in needs[i])]
                if not candidates:
                    break
                # an evaluation (RefCOCO+ splits: half a minute) before every other ready
                # step: the table gets its cells, the checkpoint it reads goes; then a step
                # of a chain already under way, then the step most others wait on
                ready = max(
                    candidates,
                    key=lambda i: (steps[i].kind == "evaluate", chained[i], weight[i], -i),
                )
                pending.remove(ready)
                start(pool, ready)
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                i, began = running.pop(future)
                step, wall = steps[i], time.perf_counter() - began
                code = future.result()
                if code != 0 and children.signum is not None:
                    stopped.append(step.title)
                    continue
                if code != 0:
                    failures.append(
                        f"{step.title} failed (exit code {code}) after "
                        f"{clock(wall)}: {' '.join(step.command)}"
                    )
                    continue
                if not step.has_output():
                    failures.append(
                        f"{step.title}: the command ended without error but its "
                        f"output is missing ({step.proof})"
                    )
                    continue
                _record(step, wall, made.pop(i))
                again = compare_with_previous(step)
                if again:
                    log(f"=== {again}")
                if on_done is not None:
                    on_done(step)
                progress.add(step.kind, wall)
                done[i] = True
                ran += 1
                log(f"=== [{i + 1}/{total}] {step.title}: done in {clock(wall)}")
    if children.signum is not None:
        name = signal.Signals(children.signum).name
        raise Interrupted(
            children.signum,
            (
                f"stopped by {name}: {ran} steps finished in this call"
                + (f", stopped: {'; '.join(stopped)}" if stopped else "")
                + (f", failed: {'; '.join(failures)}" if failures else "")
                + "; run the study again to resume it"
            ),
        )
    if failures:
        raise StepFailed("\n".join(failures) + "\nrun the study again to resume it")
    return ran


def _record_of(step: Step, wall: float | None = None, made: dict | None = None) -> dict:
    """The record of ``step``'s command: started (no ``wall``) or finished; ``made``: what
    made it, taken when it started, with the stopped starts it resumed (``interrupted``),
    whose wall times the finished record's ``wall_s`` adds to this start's."""
    made = made or {}
    record: dict = {"title": step.title, "command": list(step.command)}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if wall is None:
        record.update(started=now, threads=threads(), **made)
    else:
        earlier = sum(start.get("wall_s") or 0.0 for start in made.get(INTERRUPTED, []))
        record.update(wall_s=round(wall + earlier, 3), threads=threads(), **made, finished=now)
    if step.world is not None:
        record["world"] = dict(step.world)
    return record


def _weights_sha256(step: Step) -> str | None:
    """The SHA-256 of the weights a pre-training wrote (None for another step, or when they
    are not there)."""
    if step.kind != "pretrain" or step.proof_file is None or not step.proof_file.exists():
        return None
    return file_sha256(step.proof_file)


def weights_read(step: Step, prerequisites: Sequence[Step]) -> dict[str, str]:
    """The record field naming the pre-trained weights a fine-tuning starts from (their
    SHA-256, taken as it starts); empty for other steps."""
    if step.kind != "finetune":
        return {}
    found = [sha for before in prerequisites if (sha := _weights_sha256(before)) is not None]
    return {WEIGHTS_READ: found[0]} if found else {}


def weights_made(step: Step) -> dict[str, str]:
    """The record field naming the weights a finished pre-training wrote (their SHA-256)."""
    sha = _weights_sha256(step)
    return {} if sha is None else {WEIGHTS_MADE: sha}


def _record(step: Step, wall: float, made: dict) -> None:
    """``step.json`` of a finished step, written whole (the step is done from then on), then
    the checkpoints no later step reads go."""
    _write_json(step.record, _record_of(step, wall, {**made, **weights_made(step)}))
    started_path(step).unlink(missing_ok=True)
    _prune(step)
