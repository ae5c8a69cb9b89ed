"""A study's output: one markdown table and one figure per paper table, and ``runs.json``.

Markdown rows are the paper's, each cell ``mean ± std`` over the seeds, with Meta-Ave, the
number of seeds and a row of trivial rates; under it each row's Meta-Ave gap to the
table's first row (the paper's reference: Base, R-T, w/o w_ITM, ...) with its standard
error and its test; then each ordering the paper reports between two rows, read by that
test: holds / reversed at p < 0.05, else not significant, and with Holm's correction over
the table's orderings. Every verdict names its test
(:class:`~mmf_uvlp.replication.significance.TTest`: the paired t over the shared seeds,
Welch's t, or for a one-seed row the t against the study's pooled seed spread; its p, 95 %
confidence interval and the smallest difference it detects at 80 % power), and a gap that
is not significant and whose test could not detect the paper's difference reads "not
distinguishable at this power"; and what made the runs (``provenance.py``), a mark on each
cell whose runs were made differently or whose seed's fine-tunings read different
pre-trained weights. Figures:
grouped bars with the seeds' std as error bars and the trivial rates as black ticks; a table
with ``x`` values (Table 6, top-K) is drawn as the Meta-Ave curve over x, the trivial
Meta-Ave dashed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from mmf_uvlp.replication.aggregate import Gap, RowSummary, RunResult, Stat, meta_gap
from mmf_uvlp.replication.significance import ALPHA, POWER, PooledSpread, TTest, holm, trend
from mmf_uvlp.replication.provenance import TableProvenance
from mmf_uvlp.replication.study import PAPER_META, StudyTable
from mmf_uvlp.report.results import Cell
from mmf_uvlp.report.table import (
    COLUMNS,
    MISSING,
    TRIVIAL_NOTE,
    draw_trivial_ticks,
    meta_average,
    trivial_row,
)

COMPACT_COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("VQA", ("vqa2", "test")),
    ("NLVR2", ("nlvr2", "test")),
    ("VE", ("visual_entailment", "test")),
    ("RefCOCO+ val", ("refcoco_plus", "val")),
)


def columns(table: StudyTable) -> tuple[tuple[str, Cell], ...]:
    return COMPACT_COLUMNS if table.compact else COLUMNS


def format_stat(stat: Stat | None, seeds: int) -> str:
    """``51.2 ± 0.8`` in %; ``(n=2)`` appended when fewer than ``seeds`` values."""
    if stat is None:
        return MISSING
    text = f"{100 * stat.mean:.1f}"
    if stat.std is not None:
        text += f" ± {100 * stat.std:.1f}"
    if stat.n < seeds:
        text += f" (n={stat.n})"
    return text


ONE_SEED = "no standard error: one seed on a side"  # printed where a gap has no test
UNDERPOWERED = "not distinguishable at this power"  # not significant, the paper's gap unseen
NOT_SIGNIFICANT = "not significant"  # p >= ALPHA


def format_p(p: float) -> str:
    """``p = 0.18``, ``p = 0.003``, ``p < 0.001``."""
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.3f}" if p < 0.01 else f"p = {p:.2f}"


def format_df(df: float) -> str:
    return f"{df:.0f}" if float(df).is_integer() else f"{df:.1f}"


def format_interval(test: TTest) -> str:
    """``95 % CI [+2.6, +8.2]`` in points."""
    low, high = (100 * bound for bound in test.interval)
    return f"{100 * (1 - ALPHA):.0f} % CI [{low:+.1f}, {high:+.1f}]"


def test_text(test: TTest) -> str:
    """``paired t(2) = 18.0, p = 0.003, 95 % CI [+12.1, +19.8], detects ≥ 5.1``: the test,
    its p, the 95 % confidence interval of the difference and the smallest difference it
    detects at 80 % power (points)."""
    return (
        f"{test.kind} t({format_df(test.df)}) = {test.t:.1f}, {format_p(test.p)}, "
        f"{format_interval(test)}, detects ≥ {100 * test.detectable:.1f}"
    )


def verdict(t: float, p: float) -> str:
    """``holds`` / ``reversed`` at p < ALPHA in / against the paper's direction, else the
    direction and ``not significant``."""
    if p < ALPHA and t:
        return "holds" if t > 0 else "does not hold: reversed"
    if not t:
        return NOT_SIGNIFICANT
    direction = "the paper's direction" if t > 0 else "reversed"
    return f"{direction}, {NOT_SIGNIFICANT}"


def test_rule(spread: PooledSpread | None) -> str:
    """What each verdict's test is; ``spread``: the pooled seed spread, when a one-seed row
    was read against it."""
    pooled = (
        ""
        if spread is None
        else "; where a row has one seed, the pooled-SD t: a Meta-Ave's seed-to-seed standard "
        f"deviation pooled over the study's {len(spread.rows)} rows with two seeds or more, "
        f"{100 * spread.sd:.2f} points on df = {spread.df}, and SE = s × √(1/n1 + 1/n2)"
    )
    return (
        "Each gap names its test (paired t over the shared seeds, df = n − 1; Welch's t "
        f"where the rows share fewer than two{pooled}), its two-sided p, the "
        f"{100 * (1 - ALPHA):.0f} % confidence interval of the gap (the t distribution) and "
        f"the smallest difference it detects at {100 * POWER:.0f} % power and α = {ALPHA:g} "
        '(the noncentral t), in points ("detects"); a gap at p ≥ '
        f"{ALPHA:g} is {NOT_SIGNIFICANT}."
    )


def gap_lines(rows: Sequence[RowSummary], spread: PooledSpread | None = None) -> list[str]:
    """One line per row after the first: its Meta-Ave gap to the first row, in points, and the
    test it is read by (one-seed rows against ``spread``, the study's pooled seed spread)."""
    if len(rows) < 2:
        return []
    reference, lines, pooled = rows[0], [], False
    for row in rows[1:]:
        gap = meta_gap(row, reference, spread)
        if gap is None:
            lines.append(
                f"- {row.label}: {MISSING} (no Meta-Ave on one side, or the two "
                "average different tasks)"
            )
            continue
        text = f"- {row.label}: {100 * gap.difference:+.1f}"
        if gap.ratio is None:
            text += " (one seed on a side)" if gap.pooled is not None else f" ({ONE_SEED})"
            pooled = pooled or gap.pooled is not None
        else:
            text += f" ± {100 * gap.stderr:.1f} ({gap.ratio:.1f} SE)"
        if gap.paired is not None:
            paired = gap.paired
            text += (
                f"; paired over seeds {', '.join(map(str, paired.seeds))}: "
                f"{100 * paired.difference:+.1f} ± {100 * paired.stderr:.1f} "
                f"({paired.ratio:.1f} SE)"
            )
        test = gap.test
        if test is not None:
            text += f"; {test_text(test)}"
            if not test.significant:
                text += f": {NOT_SIGNIFICANT}"
        lines.append(text)
    return [
        "",
        f"Meta-Ave gap to {reference.label} in points, ± the standard error of the "
        "difference, sqrt(s1²/n1 + s2²/n2) over the seeds. Paired: the mean of each shared "
        "seed's difference ± its standard error (a seed fixes every system's fine-tuning "
        "order and head initialisation), reported beside it.",
        test_rule(spread if pooled else None),
        *lines,
    ]


def reading(
    gap: Gap | None, paper: float | None = None, holm_p: float | None = None, family: int = 1
) -> str:
    """How a gap above − below reads against the paper's finding that above is higher
    (by ``paper``): :func:`verdict` of its test (:attr:`Gap.test`), with the test, and
    :data:`UNDERPOWERED` where it is not significant and the smallest difference it detects is
    over the paper's; with ``holm_p`` (Holm's p over the table's ``family`` of orderings),
    the verdict after the correction too."""
    test = None if gap is None else gap.test
    if test is None:
        return f"not decided ({ONE_SEED})"
    text = f"{verdict(test.t, test.p)} ({test_text(test)})"
    if not test.significant and paper is not None and test.detectable > abs(paper):
        text += f": {UNDERPOWERED}, the paper's {100 * paper:+.1f} is under what it detects"
    if holm_p is not None and family > 1:
        text += (
            f"; Holm over the {family} orderings tested: {format_p(holm_p)}, "
            f"{verdict(test.t, holm_p)}"
        )
    return text


def _named(orderings: Sequence[str]) -> str:
    return "; ".join(orderings) if orderings else "none"


def ordering_lines(
    table: StudyTable, rows: Sequence[RowSummary], spread: PooledSpread | None = None
) -> list[str]:
    """One line per finding of the paper between two of ``rows``: the paper's Meta-Aves,
    the measured gap above − below and its reading (:func:`reading`), corrected by Holm over
    the orderings of the table that have a test; then which hold before and after."""
    by_system = {row.system: row for row in rows}
    measured = []  # (line start, gap, paper's gap, name) of each ordering shown
    lines = []
    for ordering in table.orderings:
        above, below = by_system.get(ordering.above), by_system.get(ordering.below)
        if above is None or below is None:
            continue
        high, low = ordering.paper
        text = (
            f"- {above.label} above {below.label} (paper {high:.1f} vs {low:.1f}, "
            f"{high - low:+.1f}): "
        )
        gap = meta_gap(above, below, spread)
        if gap is None:
            missing = [row.label for row in (above, below) if row.meta is None]
            lines.append(
                text
                + (
                    f"not measured yet (no Meta-Ave for {', '.join(missing)})"
                    if missing
                    else "the two average different tasks"
                )
            )
            continue
        text += f"{100 * gap.difference:+.1f}"
        if gap.stderr is not None:
            text += f" ± {100 * gap.stderr:.1f} ({gap.ratio:.1f} SE)"
        if gap.paired is not None:
            text += (
                f", paired {100 * gap.paired.difference:+.1f} ± "
                f"{100 * gap.paired.stderr:.1f} ({gap.paired.ratio:.1f} SE)"
            )
        measured.append(
            (len(lines), text, gap, (high - low) / 100, f"{above.label} above {below.label}")
        )
        lines.append(text)
    tested = [entry for entry in measured if entry[2].test is not None]
    adjusted = dict(
        zip((entry[0] for entry in tested), holm([entry[2].test.p for entry in tested]))
    )
    for index, text, gap, paper, _ in measured:
        lines[index] = f"{text}: {reading(gap, paper, adjusted.get(index), len(tested))}"
    if not lines:
        return []
    head = [
        "",
        "The paper's orderings (Meta-Ave above − below, ± the standard error of the "
        f"difference): holds at p < {ALPHA:g} in the paper's direction, reversed at p < "
        f"{ALPHA:g} against it, else not significant, and {UNDERPOWERED} where the test's "
        "smallest detectable difference is over the paper's; over two or more orderings "
        "tested, each p again with Holm's correction over the table's family. The paper's "
        "Meta-Ave reads RefCOCO+ val only, ours the mean of val, testA and testB:",
    ]
    tail = []
    if len(tested) > 1:
        before = {index: gap.test.p for index, _, gap, _, _ in tested}

        def which(p_values: Mapping[int, float], sign: int) -> str:
            return _named(
                [
                    name
                    for index, _, gap, _, name in tested
                    if p_values[index] < ALPHA and gap.test.t * sign > 0
                ]
            )

        tail = [
            f"At p < {ALPHA:g}, before Holm's correction: holds: {which(before, 1)}; "
            f"reversed: {which(before, -1)}. After it, over the {len(tested)} orderings "
            f"tested: holds: {which(adjusted, 1)}; reversed: {which(adjusted, -1)}."
        ]
    return [*head, *lines, *tail]


def trend_lines(table: StudyTable, rows: Sequence[RowSummary]) -> list[str]:
    """For a table with ``x`` values (Table 6, top-K): the least-squares slope of every seed's
    Meta-Ave against x, with its t test and 95 % interval, beside the paper's slope over its
    rows' Meta-Aves where it has them all."""
    if table.x is None:
        return []
    x_of = {system: x for (_, system), x in zip(table.rows, table.x)}
    measured = [row for row in rows if row.meta_note is None and row.seed_metas]
    points = [(x_of[row.system], meta) for row in measured for meta in row.seed_metas.values()]
    found = trend([x for x, _ in points], [meta for _, meta in points])
    if found is None:
        return []
    unit = table.x_label or "x"
    low, high = (100 * bound for bound in found.interval)
    text = (
        f"Trend: {100 * found.slope:+.3f} Meta-Ave points per unit of {unit}, least squares "
        f"over the {found.n} seeds' Meta-Aves of {len(measured)} rows; t({found.n - 2}) = "
        f"{found.t:.1f}, {format_p(found.p)}, {100 * (1 - ALPHA):.0f} % CI [{low:+.3f}, "
        f"{high:+.3f}]: {'a slope' if found.p < ALPHA else NOT_SIGNIFICANT}"
    )
    systems = table.systems()
    if all(system in PAPER_META for system in systems):
        paper = trend(list(table.x), [PAPER_META[system] for system in systems])
        text += f"; the paper's Meta-Aves give {paper.slope:+.3f}"
    return ["", text + "."]


def markdown(
    table: StudyTable,
    rows: Sequence[RowSummary],
    seeds: Sequence[int],
    trivial: Mapping[Cell, float],
    header: str,
    wall_s: float | None,
    made: TableProvenance | None = None,
    spread: PooledSpread | None = None,
) -> str:
    """The table in the paper's layout (see the module docstring); ``made``: what made its
    runs, a footnote, and the marks of the cells (``TableProvenance.marks``); ``spread``: the
    study's pooled seed spread, which one-seed rows are read against."""
    cols = columns(table)

    def mark(system: str, cell: Cell | None, text: str) -> str:
        marks = made.marks(system, cell) if made is not None else ""
        return f"{text} {marks}" if marks else text

    titles = ["System"] + [title for title, _ in cols] + ["Meta-Ave", "Seeds"]
    lines = [f"# {table.title}", "", header]
    if wall_s is not None:
        lines.append(
            f"Wall time of this table's runs (sum of the recorded runs): {wall_s / 3600:.2f} h."
        )
    lines += [
        "",
        "| " + " | ".join(titles) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(titles) - 1)) + "|",
    ]
    notes = []
    for row in rows:
        meta = format_stat(row.meta, len(row.seeds))
        if row.meta_note:
            meta += "*"
            notes.append(f"- {row.label}: Meta-Ave* is the {row.meta_note}.")
        meta = mark(row.system, None, meta)
        values = [
            mark(row.system, cell, format_stat(row.cells.get(cell), len(row.seeds)))
            for _, cell in cols
        ]
        lines.append("| " + " | ".join([row.label, *values, meta, str(len(row.seeds))]) + " |")
    lines.append("| " + " | ".join([*trivial_row(dict(trivial), cols, notes), "–"]) + " |")
    lines += [
        "",
        f"Accuracy in %, mean ± sample standard deviation (n − 1) over the seeds "
        f'({", ".join(map(str, seeds))}); Seeds: how many have results, "(n=k)": a '
        f"cell over fewer. {MISSING}: no result. Meta-Ave = mean of VQA, NLVR2, VE and "
        "RefCOCO+ (the mean of val, testA and testB), per seed, then mean ± std. " + TRIVIAL_NOTE,
    ]
    if table.compact:
        lines.append(
            'RefCOCO+: val only, as the paper\'s "Devs" column; Meta-Ave still '
            "averages val, testA and testB."
        )
    if notes:
        lines += ["", *notes]
    if made is not None and made.lines:
        lines += ["", *made.lines]
    lines += gap_lines(rows, spread)
    lines += ordering_lines(table, rows, spread)
    lines += trend_lines(table, rows)
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_bars(
    table: StudyTable,
    rows: Sequence[RowSummary],
    trivial: Mapping[Cell, float],
    path: str | os.PathLike,
) -> None:
    """Grouped bars (column groups, one bar per row) with std error bars, trivial ticks."""
    plt = _pyplot()
    cols = columns(table)
    groups = [title for title, _ in cols] + ["Meta-Ave"]
    width = 0.8 / max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(1.3 * len(groups) + 2.5, 4.5))
    for index, row in enumerate(rows):
        stats = [row.cells.get(cell) for _, cell in cols] + [row.meta]
        xs = [g - 0.4 + width * (index + 0.5) for g, s in enumerate(stats) if s is not None]
        present = [s for s in stats if s is not None]
        errors = [100 * (s.std or 0.0) for s in present]
        ax.bar(
            xs,
            [100 * s.mean for s in present],
            width,
            color=f"C{index}",
            label=row.label,
            yerr=errors if any(errors) else None,
            capsize=3,
        )
    draw_trivial_ticks(ax, dict(trivial), cols)
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel("accuracy (%), mean ± std over seeds")
    ax.set_ylim(0, 100)
    ax.set_title(table.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curve(
    table: StudyTable,
    rows: Sequence[RowSummary],
    trivial: Mapping[Cell, float],
    path: str | os.PathLike,
) -> None:
    """Meta-Ave (mean ± std over seeds) against the table's ``x``."""
    if table.x is None:
        raise ValueError(f"table {table.key} has no x values for a curve")
    plt = _pyplot()
    x_of = {label: x for (label, _), x in zip(table.rows, table.x)}
    points = [(x_of[row.label], row.meta) for row in rows if row.meta is not None]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    if points:
        ax.errorbar(
            [x for x, _ in points],
            [100 * m.mean for _, m in points],
            yerr=[100 * (m.std or 0.0) for _, m in points],
            marker="o",
            capsize=4,
            label="Meta-Ave",
        )
    trivial_meta = meta_average(dict(trivial)).value
    if trivial_meta is not None:
        ax.axhline(100 * trivial_meta, color="black", linestyle="--", linewidth=1, label="trivial")
    ax.set_xticks(list(table.x))
    ax.set_xlabel(table.x_label or "")
    ax.set_ylabel("Meta-Ave (%), mean ± std over seeds")
    ax.set_title(table.title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_table(
    table: StudyTable,
    rows: Sequence[RowSummary],
    seeds: Sequence[int],
    trivial: Mapping[Cell, float],
    header: str,
    wall_s: float | None,
    out: str | os.PathLike,
    made: TableProvenance | None = None,
    spread: PooledSpread | None = None,
) -> tuple[Path, Path]:
    """``<stem>.md`` and ``<stem>.png`` of a table in ``out`` (created)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    text, figure = folder / f"{table.stem}.md", folder / f"{table.stem}.png"
    text.write_text(
        markdown(table, rows, seeds, trivial, header, wall_s, made, spread), encoding="utf-8"
    )
    if table.x is None:
        plot_bars(table, rows, trivial, figure)
    else:
        plot_curve(table, rows, trivial, figure)
    return text, figure


def write_runs(
    results: Sequence[RunResult], settings: Mapping[str, object], path: str | os.PathLike
) -> Path:
    """``runs.json``: the study's settings and every step with its metrics, wall time and
    what made it."""
    runs = [
        {
            "kind": r.step.kind,
            "system": r.step.system,
            "seed": r.step.seed,
            "task": r.step.task,
            "title": r.step.title,
            "finished": r.finished,
            "metrics": r.metrics,
            "wall_s": r.wall_s,
            "made_by": asdict(r.made),
            "command": list(r.step.command),
            "folder": str(r.step.folder),
        }
        for r in results
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"settings": dict(settings), "runs": runs}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return path
