"""What made a run: the commit, the device, the precision, the threads and torch.

A run's ``step.json`` keeps, besides its command, what made it (:func:`made_by`, taken when
the run starts): the newest commit that changed a file outside ``results/`` and whether the
tracked files, ``results/`` aside, were as committed (``commit``, ``tree_clean``), the device
it trained on (``device``: the GPU's name when torch sees one, as MMF then trains on it, else
the CPU's model name), the precision
(``precision``: ``fp16`` when the run asks MMF for mixed precision, ``training.fp16``, on
its command line or in its config, ``bf16`` when it also asks for
``training.amp_dtype=bfloat16``, ``fp32`` when it sets ``training.fp16`` false, else what
the ``uvlp`` trainer chooses: ``bf16`` on a GPU that has it, else ``fp32``), the torch
version (``torch``) and the thread count (``threads``, written by the runner). The same
command on another processor or thread count sums floats in another order and gives
another sample, not the same number, so a table says which runs its cells come from (:func:`table_provenance`): one
line when every run was made alike, else one line per kind of run naming its rows and
seeds, and a mark on each cell whose seeds or runs were made differently. A run stopped
and resumed from its checkpoint was made by each of its starts (``interrupted`` in its
record lists the stopped ones): when they differ, the run counts as made in each of their
ways. A record written before records kept these reads ``unknown``; such records were
given, after the fact, what their ``train.log`` and git history establish (its torch from the
log's "Torch version is:" line, its precision from its command and configs) and
``unknown`` for the rest, with ``made_by_source`` saying how each field was established and
``archived_in`` the commit that first added the record. A cell any of whose runs names no
device is marked :data:`NO_DEVICE`: a number of unnamed hardware cannot be made again bit for
bit.

A pre-training's record also keeps the SHA-256 of the weights it wrote (``weights_sha256``)
and a fine-tuning's the SHA-256 of the pre-trained weights it read (``pretrained_sha256``):
weights are not archived, so a seed whose fine-tunings did not all finish in one runs folder
gets its pre-training made again, and on another processor that gives other weights. A table
then marks that seed's cells (:data:`REMADE`) and names which fine-tunings read which weights.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mmf_uvlp.replication.steps import Step
from mmf_uvlp.tasks import SPLITS_RUN
from mmf_uvlp.replication.study import REPO, _config_path, config_value
from mmf_uvlp.report.results import Cell

UNKNOWN = "unknown"
MIXED = "†"  # the mark of a cell whose runs were made differently
REMADE = "‡"  # the mark of a cell whose seed's fine-tunings read different pre-trained weights
NO_DEVICE = "§"  # the mark of a cell one of whose runs' records names no device
WEIGHTS_MADE = "weights_sha256"  # a pre-training's record: the weights it wrote
WEIGHTS_READ = "pretrained_sha256"  # a fine-tuning's record: the pre-trained weights it read
INTERRUPTED = "interrupted"  # a record's stopped starts that its run resumed (runner.py)
# mmf_run options that set the precision, and the precision their True gives: MMF's
# torch.cuda.amp switch (autocast to float16 with a gradient scaler)
PRECISION_OPTIONS = {"training.fp16": "fp16"}
AMP_DTYPE_OPTION = "training.amp_dtype"  # with fp16 on: bfloat16 makes the precision bf16
DEFAULT_PRECISION = "fp32"
RUN_NAMES = {"pretrain": "pre-training", SPLITS_RUN: "RefCOCO+ splits"}
RESULTS = "results"  # what studies write into the repository (archives), not what runs read


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def commit() -> tuple[str | None, bool | None]:
    """The commit of the code and whether its tracked files are as committed, those under
    ``results/`` (the archives a study writes as it runs) aside both times: the newest commit
    that changed a file outside ``results/``, so that the runs of a study that commits its
    archive as it goes name one commit; (None, None) outside a git checkout, e.g. an
    installed wheel."""
    head = _git("log", "-1", "--format=%H", "--", ".", f":(exclude){RESULTS}") or _git(
        "rev-parse", "HEAD"
    )
    if head is None:
        return None, None
    changes = _git(
        "status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){RESULTS}"
    )
    return head.strip(), None if changes is None else not changes.strip()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or UNKNOWN


@cache
def device() -> str:
    """What the runs train on: the first visible GPU's name when torch sees one (MMF then
    trains there), else the CPU's model name."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_model()


def _true(text: str) -> bool:
    return text.strip().lower() in ("true", "1")


def precision(command: Sequence[str]) -> str:
    """The precision a run's command asks for: a :data:`PRECISION_OPTIONS` option on its
    command line (the last one wins, as in MMF), else in its ``config=`` file, else what the
    ``uvlp`` trainer chooses when neither is set (bf16 on a GPU that has it, else fp32)."""
    found: str | None = None
    config: str | None = None
    for option in command:
        key, sep, value = option.partition("=")
        if not sep:
            continue
        if key == "config":
            config = value
        elif key in PRECISION_OPTIONS:
            found = PRECISION_OPTIONS[key] if _true(value) else DEFAULT_PRECISION
    if found is None and config is not None and _config_path(config).is_file():
        for key, name in PRECISION_OPTIONS.items():
            value = config_value(_config_path(config), key.split("."))
            if value is not None:
                found = name if _true(str(value)) else DEFAULT_PRECISION
    if found == "fp16" and _amp_dtype(command, config) == "bfloat16":
        return "bf16"
    if found is None and _amp_dtype(command, config) is None:
        from mmf_uvlp.trainers.precision import default_precision

        return default_precision()  # the trainer's choice here: bf16 on a GPU that has it
    return found or DEFAULT_PRECISION


def _amp_dtype(command: Sequence[str], config: str | None) -> str | None:
    """``training.amp_dtype`` of a command (the last on its command line, else its config)."""
    found: str | None = None
    for option in command:
        key, sep, value = option.partition("=")
        if sep and key == AMP_DTYPE_OPTION:
            found = value.strip()
    if found is None and config is not None and _config_path(config).is_file():
        value = config_value(_config_path(config), AMP_DTYPE_OPTION.split("."))
        found = None if value is None else str(value)
    return found


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def made_by(command: Sequence[str]) -> dict[str, object]:
    """The record fields of a run of ``command`` starting now (``threads``: the runner's)."""
    import torch

    head, clean = commit()
    return {
        "commit": head,
        "tree_clean": clean,
        "device": device(),
        "precision": precision(command),
        "torch": torch.__version__,
    }


@dataclass(frozen=True)
class MadeBy:
    """What a record says made its run; :data:`UNKNOWN` (None for ``clean`` / ``threads``)
    where it does not say."""

    commit: str = UNKNOWN
    clean: bool | None = None
    device: str = UNKNOWN
    precision: str = UNKNOWN
    torch: str = UNKNOWN
    threads: int | None = None

    @classmethod
    def of(cls, record: Mapping[str, object] | None) -> MadeBy:
        record = record or {}

        def text(key: str) -> str:
            value = record.get(key)
            return str(value) if value not in (None, "") else UNKNOWN

        clean, threads = record.get("tree_clean"), record.get("threads")
        return cls(
            text("commit"),
            clean if isinstance(clean, bool) else None,
            text("device"),
            text("precision"),
            text("torch"),
            threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
        )

    def describe(self) -> str:
        """``commit 1a2b3c4d5e (clean), Intel(R) Xeon(R) ..., fp32, torch 2.13.0, 1 thread``."""
        threads = (
            "threads unknown"
            if self.threads is None
            else f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        )
        if (self.commit, self.device, self.precision, self.torch) == (UNKNOWN,) * 4:
            return (
                f"commit, device, precision and torch not recorded (runs recorded before "
                f"step.json kept them), {threads}"
            )
        state = {True: " (clean)", False: " (uncommitted changes)", None: ""}[self.clean]
        device = f"device {UNKNOWN}" if self.device == UNKNOWN else self.device
        return (
            f"commit {self.commit[:10]}{state}, {device}, {self.precision}, "
            f"torch {self.torch}, {threads}"
        )


def run_made(record: Mapping[str, object] | None) -> tuple[MadeBy, ...]:
    """What made a run: its record's :class:`MadeBy`, and those of the stopped starts it
    resumed (``interrupted``) where they differ, in the order they ran."""
    record = record or {}
    starts = record.get(INTERRUPTED) or []  # a list of objects: runner.load_record checks it
    return tuple(dict.fromkeys([*(MadeBy.of(start) for start in starts), MadeBy.of(record)]))


@dataclass(frozen=True)
class TableProvenance:
    """A table's footnote on what made its runs (``lines``), the cells whose runs were
    made differently (``mixed``: (system, cell); cell None for Meta-Ave), those with a seed
    whose fine-tunings read different pre-trained weights (``remade``) and those with a run
    whose record names no device (``no_device``)."""

    lines: tuple[str, ...]
    mixed: frozenset[tuple[str, Cell | None]]
    remade: frozenset[tuple[str, Cell | None]] = frozenset()
    no_device: frozenset[tuple[str, Cell | None]] = frozenset()

    def marks(self, system: str, cell: Cell | None) -> str:
        """The marks of a cell: :data:`MIXED`, :data:`REMADE`, :data:`NO_DEVICE`, in that
        order, or none."""
        return "".join(
            mark
            for mark, cells in (
                (MIXED, self.mixed),
                (REMADE, self.remade),
                (NO_DEVICE, self.no_device),
            )
            if (system, cell) in cells
        )


def _cell_runs(steps: Sequence[Step], system: str, seed: int) -> dict[Cell, list[Step]]:
    """The runs each cell of (system, seed) comes from: its pre-training, the fine-tuning of
    its task and, for the RefCOCO+ splits, their inference."""
    unit = [step for step in steps if (step.system, step.seed) == (system, seed)]
    pretrain = [step for step in unit if step.kind == "pretrain"]
    runs: dict[Cell, list[Step]] = {}
    for step in unit:
        if step.kind == "finetune" and step.task != "refcoco_plus":
            runs[step.task, "test"] = [*pretrain, step]
    referring = [step for step in unit if step.task in ("refcoco_plus", SPLITS_RUN)]
    if any(step.task == SPLITS_RUN for step in referring):
        for split in ("val", "testA", "testB"):
            runs["refcoco_plus", split] = [*pretrain, *referring]
    return runs


def _unit_list(units: Mapping[tuple[str, int], list[str] | None]) -> str:
    """``Base seeds 0, 1; μ-VLA seed 2 (pre-training, vqa2)``: a seed alone when all its
    runs are in the group, else with the runs that are."""
    by_label: dict[str, list[str]] = {}
    for (label, seed), runs in units.items():
        by_label.setdefault(label, []).append(
            str(seed) if runs is None else f"{seed} ({', '.join(runs)})"
        )
    return "; ".join(
        f"{label} seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"
        for label, seeds in by_label.items()
    )


def _weights_read(
    steps: Sequence[Step], records: Mapping[Step, Mapping | None], system: str, seed: int
) -> dict[str, list[str]]:
    """The pre-trained weights (SHA-256) that the fine-tunings of (system, seed) read, each
    with the tasks of the fine-tunings that read it; fine-tunings whose record does not say
    are left out."""
    read: dict[str, list[str]] = {}
    for step in steps:
        if (step.system, step.seed, step.kind) == (system, seed, "finetune"):
            sha = (records.get(step) or {}).get(WEIGHTS_READ)
            if isinstance(sha, str) and sha:
                read.setdefault(sha, []).append(str(step.task))
    return read


def _remade(
    rows: Sequence[tuple[str, str]],
    seeds: Sequence[int],
    steps: Sequence[Step],
    records: Mapping[Step, Mapping | None],
    cells: Mapping[tuple[str, int], Mapping[Cell, float]],
) -> tuple[list[str], set[tuple[str, Cell | None]]]:
    """The footnote lines and the marked cells of the seeds whose shown cells come from
    fine-tunings that read different pre-trained weights."""
    lines: list[str] = []
    marked: set[tuple[str, Cell | None]] = set()
    for label, system in rows:
        for seed in seeds:
            shown = cells.get((system, seed), {})
            read = _weights_read(steps, records, system, seed)
            if len(read) < 2 or not shown:
                continue
            marked |= {(system, cell) for cell in shown} | {(system, None)}
            lines.append(
                f"- {label} seed {seed}: its fine-tunings read {len(read)} different "
                "pre-trained weights ("
                + "; ".join(
                    f"SHA-256 {sha[:12]}: {', '.join(tasks)}" for sha, tasks in read.items()
                )
                + ")"
            )
    if lines:
        lines.insert(
            0,
            f"A cell marked {REMADE} comes from a seed whose pre-training was made "
            "again (its weights, which are not archived, were gone before every "
            "fine-tuning had read them) and did not give the same weights: its "
            "fine-tunings started from different pre-trainings:",
        )
    return lines, marked


def table_provenance(
    rows: Sequence[tuple[str, str]],
    seeds: Sequence[int],
    steps: Sequence[Step],
    records: Mapping[Step, Mapping | None],
    cells: Mapping[tuple[str, int], Mapping[Cell, float]],
) -> TableProvenance:
    """What made the runs behind a table's ``rows`` ((label, system)) over ``seeds``:
    ``records`` gives each step's ``step.json``, ``cells`` the (system, seed) cells the
    table shows (only the runs behind those count)."""
    made: dict[Step, tuple[MadeBy, ...]] = {}
    used: dict[tuple[str, Cell | None], set[MadeBy]] = {}
    for label, system in rows:
        for seed in seeds:
            shown = cells.get((system, seed), {})
            for cell, runs in _cell_runs(steps, system, seed).items():
                if cell not in shown:
                    continue
                kinds = {
                    kind
                    for run in runs
                    for kind in made.setdefault(run, run_made(records.get(run)))
                }
                used.setdefault((system, cell), set()).update(kinds)
                used.setdefault((system, None), set()).update(kinds)
    kinds = set().union(*used.values()) if used else set()
    remade_lines, remade = _remade(rows, seeds, steps, records, cells)
    no_device = frozenset(
        key for key, found in used.items() if any(kind.device == UNKNOWN for kind in found)
    )
    device_lines = (
        [
            f"A cell marked {NO_DEVICE} comes from runs one or more of whose records "
            "name no device (neither the record nor its log says which processor ran "
            "it): it cannot be made again bit for bit, since another processor sums "
            "in another order."
        ]
        if no_device
        else []
    )
    if not kinds:
        return TableProvenance((), frozenset())
    if len(kinds) == 1:
        return TableProvenance(
            (f"Made by: {next(iter(kinds)).describe()}.", *remade_lines, *device_lines),
            frozenset(),
            frozenset(remade),
            no_device,
        )
    groups: dict[MadeBy, dict[tuple[str, int], list[str] | None]] = {}
    for label, system in rows:
        for seed in seeds:
            unit = [run for run in made if (run.system, run.seed) == (system, seed)]
            for kind in dict.fromkeys(kind for run in unit for kind in made[run]):
                mine = [RUN_NAMES.get(run.task, run.task) for run in unit if kind in made[run]]
                groups.setdefault(kind, {})[label, seed] = None if len(mine) == len(unit) else mine
    lines = [
        f"Runs made in {len(kinds)} different ways (commit, device, precision, torch or "
        f"threads); a cell marked {MIXED} averages runs of more than one, and a number "
        "made on other hardware or code is another sample, not the same number:"
    ]
    lines += [
        f"- {kind.describe()}: {_unit_list(units)}"
        for kind, units in sorted(groups.items(), key=lambda item: item[0].describe())
    ]
    return TableProvenance(
        tuple(lines + remade_lines + device_lines),
        frozenset(key for key, found in used.items() if len(found) > 1),
        frozenset(remade),
        no_device,
    )
