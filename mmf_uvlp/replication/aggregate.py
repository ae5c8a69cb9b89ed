"""Results of a study: each run's cells, and each table row's mean ± std across seeds.

A (system, seed) gets its cells from its own runs: the test metric of each fine-tuning run
(VQA, NLVR2, VE) and RefCOCO+ val / testA / testB from the split inference, each read by
:func:`mmf_uvlp.report.collect_run`. Per row and cell: the mean and the sample standard
deviation (n - 1) over the seeds that have the cell. Meta-Ave is computed per seed by
:func:`mmf_uvlp.report.meta_average`, then averaged the same way over the seeds that cover
the same tasks (those with every task when there are any), so its std is the spread of
comparable Meta-Aves. :func:`meta_gap` is one row's Meta-Ave minus another's,
with the standard error of that difference: unpaired (Welch), and paired over the seeds both
rows share (a seed fixes the fine-tuning order and head initialisation of every system, so a
seed's two runs differ only by the system; the paired error removes the seeds' common spread).
:class:`~mmf_uvlp.replication.significance.TTest` is the test a gap is read by
(:attr:`Gap.test`): the paired t over the shared seeds (df = n - 1), else Welch's t, else,
where a row has one seed, the t against the seed spread pooled over the study's rows
(:func:`study_spread`); its two-sided p, 95 % confidence interval and the smallest
difference it detects at 80 % power (``significance.py``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from mmf_uvlp.replication.provenance import MadeBy
from mmf_uvlp.replication.significance import PooledSpread, TTest, pooled_spread, t_test
from mmf_uvlp.replication.steps import Step
from mmf_uvlp.tasks import SPLITS_RUN
from mmf_uvlp.report.results import LOG_FILE, Cell, collect_run, parse_log
from mmf_uvlp.report.table import MetaAverage, meta_average

SeedCells = Mapping[int, Mapping[Cell, float]]


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (None for a single value) of ``n`` values."""

    mean: float
    std: float | None
    n: int


def summarize(values: Sequence[float]) -> Stat:
    """:class:`Stat` of non-empty ``values``."""
    if not values:
        raise ValueError("summarize: no values")
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"summarize: non-finite values {list(values)}")
    std = statistics.stdev(values) if len(values) > 1 else None
    return Stat(statistics.fmean(values), std, len(values))


@dataclass(frozen=True)
class RowSummary:
    """One table row: ``cells`` and ``meta`` over the seeds; ``meta_note`` when Meta-Ave is
    over fewer parts (see :func:`meta_average`) or leaves seeds out; ``seeds`` with any
    result; ``seed_metas``: the Meta-Ave of each seed that ``meta`` averages;
    ``meta_parts``: the parts those average (see :class:`MetaAverage`)."""

    label: str
    system: str
    cells: dict[Cell, Stat]
    meta: Stat | None
    meta_note: str | None
    seeds: tuple[int, ...]
    seed_metas: dict[int, float]
    meta_parts: tuple[str, ...] = ()


def summarize_row(label: str, system: str, per_seed: SeedCells) -> RowSummary:
    """Mean ± std of every cell and of Meta-Ave across the seeds of ``per_seed``."""
    seeds = tuple(sorted(seed for seed, cells in per_seed.items() if cells))
    keys = sorted({cell for seed in seeds for cell in per_seed[seed]})
    cells = {
        cell: summarize([per_seed[s][cell] for s in seeds if cell in per_seed[s]]) for cell in keys
    }
    metas = {s: meta_average(dict(per_seed[s])) for s in seeds}
    seed_metas, parts, note = _comparable_metas(metas)
    values = list(seed_metas.values())
    return RowSummary(
        label, system, cells, summarize(values) if values else None, note, seeds, seed_metas, parts
    )


def _seed_list(seeds: Sequence[int]) -> str:
    """``seed 2`` or ``seeds 0, 1``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def _comparable_metas(
    metas: Mapping[int, MetaAverage],
) -> tuple[dict[int, float], tuple[str, ...], str | None]:
    """The Meta-Aves of the seeds that average the same tasks, the parts they average and
    the row's Meta-Ave note.

    A Meta-Ave over seeds that cover different tasks would compare nothing: the seeds with
    every task are used when there are any, else those with the most tasks (the most seeds
    among equals); the note names what it averages and which seeds it leaves out."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for seed, meta in sorted(metas.items()):
        if meta.value is not None:
            groups.setdefault(meta.parts, []).append(seed)
    if not groups:
        return {}, (), None
    parts = max(
        groups,
        key=lambda p: (metas[groups[p][0]].note is None, len(p), len(groups[p]), -groups[p][0]),
    )
    used = groups.pop(parts)
    values, note = {s: metas[s].value for s in used}, metas[used[0]].note
    if not groups:
        return values, parts, note
    left_out = ", ".join(
        f"{_seed_list(s)} ({metas[s[0]].note})"
        for s in sorted(groups.values(), key=lambda seeds: seeds[0])
    )
    head = (
        f"mean over {_seed_list(used)}, the seeds with every task"
        if note is None
        else f"{note}, over {_seed_list(used)}"
    )
    return values, parts, f"{head} (left out: {left_out})"


def _ratio(difference: float, stderr: float | None) -> float | None:
    """|difference| in standard errors (None without a standard error; inf for a nonzero
    difference over seeds that agree exactly)."""
    if stderr is None:
        return None
    if stderr == 0:
        return math.inf if difference else 0.0
    return abs(difference) / stderr


def welch_df(a: Stat, b: Stat) -> float:
    """The Welch–Satterthwaite degrees of freedom of two means' difference (each n > 1)."""
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    if va + vb == 0:
        return float(a.n + b.n - 2)
    return (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))


@dataclass(frozen=True)
class PairedGap:
    """The mean over ``seeds`` (both rows have them) of a seed's Meta-Ave difference, and
    its standard error, the differences' sample std / sqrt(n)."""

    difference: float
    stderr: float
    seeds: tuple[int, ...]

    @property
    def ratio(self) -> float | None:
        return _ratio(self.difference, self.stderr)

    @property
    def test(self) -> TTest:
        """The paired t over the seeds, df = n - 1."""
        return t_test("paired", self.difference, self.stderr, len(self.seeds) - 1)


@dataclass(frozen=True)
class Gap:
    """A row's mean Meta-Ave minus the reference row's, and the standard error of that
    difference, sqrt(s1^2 / n1 + s2^2 / n2) over the seeds (None without two seeds in each);
    ``paired`` over the seeds both rows share (None with fewer than two); ``df``: the Welch
    degrees of freedom of ``stderr``; ``pooled``: where a row has one seed, the test against
    the study's pooled seed spread (None without one)."""

    difference: float
    stderr: float | None
    paired: PairedGap | None = None
    df: float | None = None
    pooled: TTest | None = None

    @property
    def ratio(self) -> float | None:
        return _ratio(self.difference, self.stderr)

    @property
    def test(self) -> TTest | None:
        """The test the gap is read by: the paired t when the rows share two seeds or more,
        else Welch's t, else the t against the pooled spread (one seed on a side), else
        None."""
        if self.paired is not None:
            return self.paired.test
        if self.stderr is None or self.df is None:
            return self.pooled
        return t_test("Welch", self.difference, self.stderr, self.df)


def meta_gap(
    row: RowSummary, reference: RowSummary, spread: PooledSpread | None = None
) -> Gap | None:
    """``row``'s Meta-Ave gap to ``reference`` (None when either has no Meta-Ave, or when
    the two average different tasks); where one of them has a single seed, read against
    ``spread`` (the study's pooled seed spread, :func:`study_spread`) when given."""
    if row.meta is None or reference.meta is None or row.meta_parts != reference.meta_parts:
        return None
    means = (row.meta, reference.meta)
    stderr = df = None
    if all(stat.std is not None for stat in means):
        stderr = math.sqrt(sum(stat.std**2 / stat.n for stat in means))
        df = welch_df(*means)
    shared = tuple(sorted(set(row.seed_metas) & set(reference.seed_metas)))
    paired = None
    if len(shared) > 1:
        differences = [row.seed_metas[s] - reference.seed_metas[s] for s in shared]
        paired = PairedGap(
            statistics.fmean(differences),
            statistics.stdev(differences) / math.sqrt(len(shared)),
            shared,
        )
    difference = row.meta.mean - reference.meta.mean
    pooled = None
    if stderr is None and spread is not None:
        pooled = spread.test(difference, row.meta.n, reference.meta.n)
    return Gap(difference, stderr, paired, df, pooled)


def study_spread(rows: Sequence[RowSummary]) -> PooledSpread | None:
    """The seed spread of a Meta-Ave pooled over ``rows`` (a study's rows: every system once)
    with two seeds or more that average every task."""
    return pooled_spread(
        [
            (row.system, row.meta.std, row.meta.n)
            for row in rows
            if row.meta is not None and row.meta.std is not None and row.meta_note is None
        ]
    )


@dataclass(frozen=True)
class RunResult:
    """One step's outcome for ``runs.json``: every ``val/`` and ``test/`` value its log
    ends with, its wall time (None when it ran before wall times were recorded) and what
    made it."""

    step: Step
    finished: bool
    metrics: dict[str, float]
    wall_s: float | None
    made: MadeBy = MadeBy()


def run_result(step: Step, record: dict | None) -> RunResult:
    log = step.folder / LOG_FILE
    metrics = parse_log(log) if log.exists() else {}
    wall = None if record is None else record.get("wall_s")
    return RunResult(step, step.done(), metrics, wall, MadeBy.of(record))


def seed_cells(steps: Sequence[Step]) -> dict[tuple[str, int], dict[Cell, float]]:
    """(system, seed) -> its table cells, from its finished fine-tuning and split runs."""
    cells: dict[tuple[str, int], dict[Cell, float]] = {}
    for step in steps:
        if step.kind not in ("finetune", "evaluate") or not step.done():
            continue
        found = collect_run(step.folder).cells
        unit = cells.setdefault((step.system, step.seed), {})
        if step.task == SPLITS_RUN:
            unit.update({cell: v for cell, v in found.items() if cell[0] == "refcoco_plus"})
        elif step.task != "refcoco_plus" and (step.task, "test") in found:
            unit[step.task, "test"] = found[step.task, "test"]
    return cells


def table_rows(
    rows: Sequence[tuple[str, str]],
    seeds: Sequence[int],
    cells: Mapping[tuple[str, int], Mapping[Cell, float]],
) -> list[RowSummary]:
    """The summaries of a table's rows ((label, system)) over ``seeds``."""
    return [
        summarize_row(label, system, {s: cells.get((system, s), {}) for s in seeds})
        for label, system in rows
    ]
