"""The paper's Table 1: rows = systems, VQA | NLVR2 | VE | RefCOCO+ val, testA, testB | Meta-Ave.

Meta-Ave (paper) = mean of VQA test-dev, NLVR2 test-P, VE test and RefCOCO+ (itself the
mean of val, testA and testB). It spans the runs of four tasks, so it is computed here and
not as an in-run MMF metric. A missing cell is shown as "—"; a Meta-Ave over fewer tasks
(or a RefCOCO+ part over fewer splits) is marked with "*" and a note saying what it
averages, never silently.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mmf_uvlp.report.results import Cell, RunResults, collect_run

MISSING = "—"
TRIVIAL_LABEL = "Trivial (majority / chance)"
TRIVIAL_NOTE = (
    "Trivial, fitted on the train split and scored on the test split: VQA the best "
    "train answer of each question type (a question-only model), NLVR2 and VE the "
    "train split's majority label, RefCOCO+ a uniformly drawn proposal's chance of "
    "IoU ≥ 0.5, from the world's annotation files."
)
COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("VQA", ("vqa2", "test")),
    ("NLVR2", ("nlvr2", "test")),
    ("VE", ("visual_entailment", "test")),
    ("RefCOCO+ val", ("refcoco_plus", "val")),
    ("testA", ("refcoco_plus", "testA")),
    ("testB", ("refcoco_plus", "testB")),
)
# The four parts of Meta-Ave, each the mean of its cells.
META_PARTS: tuple[tuple[str, tuple[Cell, ...]], ...] = (
    ("VQA", (("vqa2", "test"),)),
    ("NLVR2", (("nlvr2", "test"),)),
    ("VE", (("visual_entailment", "test"),)),
    ("RefCOCO+", (("refcoco_plus", "val"), ("refcoco_plus", "testA"), ("refcoco_plus", "testB"))),
)


@dataclass(frozen=True)
class MetaAverage:
    """Meta-Ave of one row: ``value`` (fraction, None when nothing to average), ``parts``
    it averages (a part with only some of its cells: ``"RefCOCO+ (val only)"``) and, when
    it is not over all four complete parts, a ``note`` saying what it averages."""

    value: float | None
    note: str | None
    parts: tuple[str, ...] = ()


def meta_average(cells: dict[Cell, float]) -> MetaAverage:
    """Mean of the available Meta-Ave parts (see the module docstring)."""
    parts: list[float] = []
    used: list[str] = []
    missing: list[str] = []
    for name, part_cells in META_PARTS:
        present = [c for c in part_cells if c in cells]
        if not present:
            missing.append(name)
            continue
        parts.append(sum(cells[c] for c in present) / len(present))
        if len(present) < len(part_cells):
            name += f" ({', '.join(split for _, split in present)} only)"
        used.append(name)
    if not parts:
        return MetaAverage(None, None)
    value = sum(parts) / len(parts)
    if used == [name for name, _ in META_PARTS]:
        return MetaAverage(value, None, tuple(used))
    note = f"mean of {', '.join(used)}"
    if missing:
        note += f"; missing: {', '.join(missing)}"
    return MetaAverage(value, note, tuple(used))


def trivial_row(
    trivial: dict[Cell, float], columns: Sequence[tuple[str, Cell]], notes: list[str]
) -> list[str]:
    """The trivial rates' table cells: label, ``columns``' values, Meta-Ave ("*" and a line
    in ``notes`` when it averages fewer parts)."""
    meta = meta_average(dict(trivial))
    meta_text = _percent(meta.value)
    if meta.note:
        meta_text += "*"
        notes.append(f"- Trivial: Meta-Ave* is the {meta.note}.")
    return (
        [f"*{TRIVIAL_LABEL}*"] + [_percent(trivial.get(cell)) for _, cell in columns] + [meta_text]
    )


def draw_trivial_ticks(ax, trivial: dict[Cell, float], columns: Sequence[tuple[str, Cell]]) -> None:
    """The trivial rates as black ticks over the bar groups of ``columns`` and Meta-Ave."""
    values = [trivial.get(cell) for _, cell in columns] + [meta_average(dict(trivial)).value]
    label: str | None = "trivial"
    for group, value in enumerate(values):
        if value is not None:
            ax.hlines(
                100 * value, group - 0.42, group + 0.42, colors="black", linewidth=1.5, label=label
            )
            label = None


@dataclass(frozen=True)
class Row:
    system: str
    cells: dict[Cell, float]

    @property
    def meta(self) -> MetaAverage:
        return meta_average(self.cells)


def _percent(value: float | None) -> str:
    return MISSING if value is None else f"{100 * value:.1f}"


class Table:
    """Rows of systems in the layout of the paper's Table 1 (values are fractions), and
    optionally the ``trivial`` rates of a predictor that ignores the image (a last row in
    italics, black ticks in the chart)."""

    def __init__(self, rows: Sequence[Row], trivial: dict[Cell, float] | None = None):
        names = [row.system for row in rows]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"systems named twice: {duplicates}")
        self.rows = list(rows)
        self.trivial = trivial

    @classmethod
    def from_runs(
        cls,
        runs: Sequence[tuple[str | None, str | os.PathLike]],
        trivial: dict[Cell, float] | None = None,
    ) -> Table:
        """One row per ``(system, run folder)``; a system of None is named by the run's
        ``results.json`` files (their ``system``), else by the folder's name."""
        return cls(
            [
                Row(_system_name(name, run), run.cells)
                for name, run in ((name, collect_run(path)) for name, path in runs)
            ],
            trivial,
        )

    def markdown(self) -> str:
        header = ["System"] + [title for title, _ in COLUMNS] + ["Meta-Ave"]
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        ]
        notes = []
        for row in self.rows:
            meta = row.meta
            meta_text = _percent(meta.value)
            if meta.note:
                meta_text += "*"
                notes.append(f"- {row.system}: Meta-Ave* is the {meta.note}.")
            values = [_percent(row.cells.get(cell)) for _, cell in COLUMNS]
            lines.append("| " + " | ".join([row.system] + values + [meta_text]) + " |")
        if self.trivial is not None:
            lines.append("| " + " | ".join(trivial_row(self.trivial, COLUMNS, notes)) + " |")
        lines.append("")
        lines.append(
            f"Accuracy in %. {MISSING}: no result. Meta-Ave = mean of VQA, NLVR2, VE "
            "and RefCOCO+ (the mean of val, testA, testB)."
        )
        if self.trivial is not None:
            lines.append(TRIVIAL_NOTE)
        if notes:
            lines.append("")
            lines.extend(notes)
        return "\n".join(lines) + "\n"

    def plot(self, path: str | os.PathLike, title: str = "Downstream results") -> None:
        """A grouped bar chart (one group per column, one bar per system) as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        groups = [title_ for title_, _ in COLUMNS] + ["Meta-Ave"]
        width = 0.8 / max(len(self.rows), 1)
        fig, ax = plt.subplots(figsize=(1.3 * len(groups) + 2, 4.5))
        for index, row in enumerate(self.rows):
            meta = row.meta
            values = [row.cells.get(cell) for _, cell in COLUMNS] + [meta.value]
            label: str | None = row.system  # on the row's first bar only
            for group, value in enumerate(values):
                x = group - 0.4 + width * (index + 0.5)
                if value is None:
                    ax.text(x, 1, MISSING, ha="center", va="bottom", fontsize=8)
                    continue
                partial = group == len(COLUMNS) and meta.note is not None
                ax.bar(
                    x,
                    100 * value,
                    width,
                    color=f"C{index}",
                    hatch="//" if partial else None,
                    label=label,
                )
                label = None
        if self.trivial is not None:
            draw_trivial_ticks(ax, self.trivial, COLUMNS)
        ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        if any(row.meta.note for row in self.rows):
            title += "  (hatched Meta-Ave: over fewer tasks, see table notes)"
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    def write(self, out: str | os.PathLike) -> tuple[Path, Path]:
        """``table.md`` and ``table.png`` in ``out`` (created)."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        markdown, chart = folder / "table.md", folder / "table.png"
        markdown.write_text(self.markdown(), encoding="utf-8")
        self.plot(chart)
        return markdown, chart


def _system_name(name: str | None, run: RunResults) -> str:
    if name is not None:
        return name
    if len(run.systems) > 1:
        raise ValueError(
            f"{run.path}: results.json files name several systems {run.systems}; "
            "give the row a name with --run NAME=PATH"
        )
    return run.systems[0] if run.systems else run.path.resolve().name
