"""Evaluation results of a run: MMF ``train.log`` lines and ``results.json`` files.

A run is a folder (searched recursively) holding MMF save dirs and/or result files.

``train.log``: MMF's progress lines, ``simple`` (``progress: 4/4, test/vqa2/vqa_accuracy:
0.6123, ...``) or ``json`` log format, read strictly by :mod:`mmf_uvlp.report.mmf_log` (a
value cut short, or two runs appended to one log, is an error naming the file and line).
The last logged value of each key counts. Keys read (:data:`LOG_KEYS`, in order
of preference for a cell):

- ``test/vqa2/vqa_accuracy``, ``test/nlvr2/accuracy``, ``test/visual_entailment/accuracy``;
- ``test/refcoco_plus_{val,testA,testB}/refcoco_accuracy`` (the RefCOCO+ evaluation views);
  ``val/refcoco_plus/refcoco_accuracy`` stands in for val when no view reported it.

``results.json`` (one object, or a list of them), values are fractions in [0, 1]::

    {"system": "μ-VLA",                  # optional: the row name for `--run PATH`
     "task": "vqa2" | "nlvr2" | "visual_entailment" | "refcoco_plus",
     "metrics": {"test": 0.721, "val": ..., "testA": ..., "testB": ...}}

A ``results.json`` value wins over a log value of the same cell; two logs (for the same
key) or two result files giving different values for one cell are an error.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from mmf_uvlp.report.mmf_log import parse_log

from mmf_uvlp.tasks import RESULT_SPLITS as SPLITS
from mmf_uvlp.tasks import TASKS

RESULTS_FILE = "results.json"
LOG_FILE = "train.log"

Cell = tuple[str, str]  # (task, split)

# MMF log key -> cell; a key listed earlier wins over a later key for the same cell.
LOG_KEYS: dict[str, Cell] = {
    "test/vqa2/vqa_accuracy": ("vqa2", "test"),
    "test/nlvr2/accuracy": ("nlvr2", "test"),
    "test/visual_entailment/accuracy": ("visual_entailment", "test"),
    "test/refcoco_plus_val/refcoco_accuracy": ("refcoco_plus", "val"),
    "test/refcoco_plus_testA/refcoco_accuracy": ("refcoco_plus", "testA"),
    "test/refcoco_plus_testB/refcoco_accuracy": ("refcoco_plus", "testB"),
    "val/refcoco_plus/refcoco_accuracy": ("refcoco_plus", "val"),
}


@dataclass
class RunResults:
    """The cells of one run, where each came from, and the systems its result files name."""

    path: Path
    cells: dict[Cell, float] = field(default_factory=dict)
    sources: dict[Cell, str] = field(default_factory=dict)
    systems: list[str] = field(default_factory=list)


def read_results_file(path: str | os.PathLike) -> list[dict]:
    """The checked entries of a ``results.json`` (see the module docstring)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid json ({e.msg})") from None
    entries = data if isinstance(data, list) else [data]
    for index, entry in enumerate(entries):
        where = f"{path} [entry {index}]" if isinstance(data, list) else str(path)
        if not isinstance(entry, dict):
            raise ValueError(
                f"{where}: expected an object with 'task' and 'metrics', got {type(entry).__name__}"
            )
        if entry.get("task") not in TASKS:
            raise ValueError(
                f"{where}: field 'task': expected one of {list(TASKS)}, got {entry.get('task')!r}"
            )
        system = entry.get("system")
        if system is not None and (not isinstance(system, str) or not system):
            raise ValueError(
                f"{where}: field 'system': expected a non-empty string, got {system!r}"
            )
        metrics = entry.get("metrics")
        if not isinstance(metrics, dict) or not metrics:
            raise ValueError(
                f"{where}: field 'metrics': expected an object of split -> value, got {metrics!r}"
            )
        for split, value in metrics.items():
            if split not in SPLITS:
                raise ValueError(f"{where}: metrics key {split!r}: expected one of {list(SPLITS)}")
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= 1
            ):
                raise ValueError(
                    f"{where}: metrics.{split}: expected a fraction in [0, 1] "
                    f"(0.721 for 72.1%), got {value!r}"
                )
    return entries


def _set(
    cells: dict[Cell, float], sources: dict[Cell, str], cell: Cell, value: float, source: str
) -> None:
    """Record a value; a second, different value for the same cell is an error."""
    if cell in cells and cells[cell] != value:
        raise ValueError(
            f"two values for {cell[0]} {cell[1]}: {cells[cell]} ({sources[cell]}) "
            f"and {value} ({source}); keep one result per task and split in a run"
        )
    cells[cell], sources[cell] = value, source


def collect_run(path: str | os.PathLike) -> RunResults:
    """Every result under ``path``: ``results.json`` files over ``train.log`` lines."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"run folder not found: {root}")
    run = RunResults(root)
    logs, result_files = sorted(root.rglob(LOG_FILE)), sorted(root.rglob(RESULTS_FILE))
    if not logs and not result_files:
        raise FileNotFoundError(f"no {LOG_FILE} or {RESULTS_FILE} under {root}")

    # For each cell, the values of its most preferred log key found in any log.
    best: dict[Cell, tuple[int, list[tuple[float, str]]]] = {}
    for log in logs:
        values = parse_log(log)
        for rank, (key, cell) in enumerate(LOG_KEYS.items()):
            if key not in values or (cell in best and best[cell][0] < rank):
                continue
            if cell not in best or best[cell][0] > rank:
                best[cell] = (rank, [])
            best[cell][1].append((values[key], f"{log}: {key}"))
    log_cells: dict[Cell, float] = {}
    log_sources: dict[Cell, str] = {}
    for cell, (_, found) in best.items():
        for value, source in found:
            _set(log_cells, log_sources, cell, value, source)

    file_cells: dict[Cell, float] = {}
    file_sources: dict[Cell, str] = {}
    for results in result_files:
        for entry in read_results_file(results):
            if entry.get("system") and entry["system"] not in run.systems:
                run.systems.append(entry["system"])
            for split, value in entry["metrics"].items():
                _set(file_cells, file_sources, (entry["task"], split), float(value), str(results))

    run.cells = {**log_cells, **file_cells}
    run.sources = {**log_sources, **file_sources}
    return run
