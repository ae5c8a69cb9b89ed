"""Aggregation of the replication study on crafted runs (hand-computed answers): mean / sample
std / Meta-Ave, the Meta-gap and its orderings, the tables; the trivial rates."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mmf_uvlp.replication.aggregate import (
    meta_gap,
    seed_cells,
    summarize,
    summarize_row,
    t_test,
    table_rows,
)
from mmf_uvlp.replication.render import (
    format_stat,
    gap_lines,
    markdown,
    ordering_lines,
    write_table,
)
from mmf_uvlp.replication.significance import PooledSpread
from mmf_uvlp.replication.steps import Settings, plan, system_steps
from mmf_uvlp.replication.study import SYSTEMS, TABLES
from mmf_uvlp.report.trivial import (
    answer_per_type,
    best_constant_vqa,
    majority_rate,
    proposal_chance,
    trivial_rates,
    vqa_answer_score,
    vqa_prior_rate,
)
from mmf_uvlp.replication.world import World

from helpers import trivial_by_hand
from helpers.replication import wall_line, wall_line_of, write_train_log


# ----------------------------------------------------------------------------- aggregation


def test_mean_and_sample_std():
    stat = summarize([0.5, 0.7, 0.6])
    assert stat.mean == pytest.approx(0.6)
    assert stat.std == pytest.approx(0.1)  # sqrt((0.01 + 0.01 + 0) / (3 - 1))
    assert stat.n == 3
    single = summarize([0.42])
    assert (single.mean, single.std, single.n) == (0.42, None, 1)
    with pytest.raises(ValueError, match="no values"):
        summarize([])


SEED0 = {
    ("vqa2", "test"): 0.50,
    ("nlvr2", "test"): 0.60,
    ("visual_entailment", "test"): 0.70,
    ("refcoco_plus", "val"): 0.40,
    ("refcoco_plus", "testA"): 0.50,
    ("refcoco_plus", "testB"): 0.60,
}
SEED1 = {
    ("vqa2", "test"): 0.54,
    ("nlvr2", "test"): 0.64,
    ("visual_entailment", "test"): 0.66,
    ("refcoco_plus", "val"): 0.46,
    ("refcoco_plus", "testA"): 0.50,
    ("refcoco_plus", "testB"): 0.54,
}


def test_row_mean_std_and_meta_ave_across_seeds():
    row = summarize_row("μ-VLA", "uvla", {0: SEED0, 1: SEED1})
    assert row.seeds == (0, 1)
    vqa = row.cells["vqa2", "test"]
    assert vqa.mean == pytest.approx(0.52) and vqa.std == pytest.approx(0.04 / math.sqrt(2))
    # Meta-Ave per seed: (0.50 + 0.60 + 0.70 + mean(0.40, 0.50, 0.60)) / 4 = 0.575 and
    # (0.54 + 0.64 + 0.66 + mean(0.46, 0.50, 0.54)) / 4 = 0.585; then mean and std.
    assert row.meta.mean == pytest.approx(0.58)
    assert row.meta.std == pytest.approx(0.01 / math.sqrt(2))
    assert row.meta_note is None
    assert format_stat(vqa, 2) == "52.0 ± 2.8"
    assert format_stat(row.meta, 2) == "58.0 ± 0.7"


def test_a_seed_missing_a_task_is_counted_and_its_meta_ave_marked():
    partial = {k: v for k, v in SEED1.items() if k[0] != "nlvr2"}
    row = summarize_row("Base", "base", {0: SEED0, 1: partial, 2: {}})
    assert row.seeds == (0, 1)  # seed 2 has no result at all
    nlvr2 = row.cells["nlvr2", "test"]
    assert (nlvr2.mean, nlvr2.std, nlvr2.n) == (0.60, None, 1)
    assert format_stat(nlvr2, 2) == "60.0 (n=1)"
    # Seed 1's Meta-Ave leaves NLVR2 out, so it is not averaged with seed 0's (0.575).
    assert (row.meta.mean, row.meta.n) == (pytest.approx(0.575), 1)
    assert row.seed_metas == {0: pytest.approx(0.575)}
    assert row.meta_note == (
        "mean over seed 0, the seeds with every task (left out: seed 1 "
        "(mean of VQA, VE, RefCOCO+; missing: NLVR2))"
    )
    assert format_stat(row.meta, len(row.seeds)) == "57.5 (n=1)"


def test_without_a_complete_seed_meta_ave_averages_the_seeds_with_the_most_tasks():
    no_nlvr2 = {k: v for k, v in SEED1.items() if k[0] != "nlvr2"}
    no_ve = {k: v for k, v in SEED0.items() if k[0] != "visual_entailment"}
    row = summarize_row("Aligned VLP", "aligned_vlp", {0: no_nlvr2, 1: no_nlvr2, 2: no_ve})
    assert sorted(row.seed_metas) == [0, 1]
    assert row.meta.mean == pytest.approx((0.54 + 0.66 + 0.50) / 3)
    assert row.meta_note == (
        "mean of VQA, VE, RefCOCO+; missing: NLVR2, over seeds 0, 1 "
        "(left out: seed 2 (mean of VQA, NLVR2, RefCOCO+; missing: VE))"
    )
    same = summarize_row("Base", "base", {0: no_nlvr2, 1: no_nlvr2})
    assert same.meta_note == "mean of VQA, VE, RefCOCO+; missing: NLVR2"
    assert same.meta.n == 2
    # More tasks beat more seeds: seed 0's three tasks, not seeds 1 and 2's RefCOCO+ alone.
    refcoco = {k: v for k, v in SEED1.items() if k[0] == "refcoco_plus"}
    fewer = summarize_row("Base", "base", {0: no_nlvr2, 1: refcoco, 2: refcoco})
    assert sorted(fewer.seed_metas) == [0]
    assert fewer.meta_note.endswith(
        ", over seed 0 (left out: seeds 1, 2 (mean of RefCOCO+; missing: VQA, NLVR2, VE))"
    )


def _fake_runs(settings: Settings, system: str, values: dict) -> None:
    """MMF log lines for every run of ``system``: values[seed] = its cells."""
    for step in system_steps(SYSTEMS[system], 0, settings) + system_steps(
        SYSTEMS[system], 1, settings
    ):
        cells = values[step.seed]
        if step.kind == "finetune" and step.task != "refcoco_plus":
            metric = "vqa_accuracy" if step.task == "vqa2" else "accuracy"
            write_train_log(
                step.folder,
                f"progress: 4/4, val/{step.task}/{metric}: 0.9999",
                f"progress: 4/4, test/{step.task}/{metric}: {cells[step.task, 'test']:.4f}",
            )
        elif step.kind == "finetune":  # its val is not a table cell: the split run's is
            write_train_log(
                step.folder,
                "progress: 4/4, val/refcoco_plus/refcoco_accuracy: 0.9999",
                "progress: 4/4, test/refcoco_plus/refcoco_accuracy: 0.9999",
            )
        elif step.kind == "evaluate":
            write_train_log(
                step.folder,
                "progress: 4/4, "
                + ", ".join(
                    f"test/refcoco_plus_{split}/refcoco_accuracy: {cells['refcoco_plus', split]:.4f}"
                    for split in ("val", "testA", "testB")
                ),
            )
        elif step.kind == "pretrain":
            step.folder.mkdir(parents=True)
            (step.folder / "uvla_final.pth").write_bytes(b"weights")
        # what the runner writes once a run finished
        step.record.write_text(
            json.dumps({"title": step.title, "command": list(step.command), "wall_s": 1.0})
        )


def test_tables_from_crafted_run_folders(tmp_path, saved_figures):
    settings = Settings(World(tmp_path / "world"), tmp_path / "runs", seeds=(0, 1))
    _fake_runs(settings, "uvla", {0: SEED0, 1: SEED1})
    _fake_runs(settings, "no_witm", {0: SEED1, 1: SEED1})
    cells = seed_cells(plan([SYSTEMS["uvla"], SYSTEMS["no_witm"]], settings))
    assert cells["uvla", 0] == SEED0 and cells["uvla", 1] == SEED1  # not the 0.9999 values
    rows = table_rows(TABLES["4"].rows, (0, 1), cells)
    assert [r.label for r in rows] == ["w/o w_ITM", "w_ITM"]
    assert rows[0].cells["vqa2", "test"].std == 0.0
    trivial = {("nlvr2", "test"): 0.5}
    text = markdown(TABLES["4"], rows, (0, 1), trivial, "World x.", None)
    lines = text.splitlines()
    assert lines[4] == "| System | VQA | NLVR2 | VE | RefCOCO+ val | Meta-Ave | Seeds |"
    assert (
        lines[7] == "| w_ITM | 52.0 ± 2.8 | 62.0 ± 2.8 | 68.0 ± 2.8 | 43.0 ± 4.2 | 58.0 ± 0.7 | 2 |"
    )
    # Meta-Ave of the trivial row: over NLVR2 only.
    assert lines[8] == "| *Trivial (majority / chance)* | — | 50.0 | — | — | 50.0* | – |"
    assert "- Trivial: Meta-Ave* is the mean of NLVR2; missing: VQA, VE, RefCOCO+." in lines
    # The gap to the first row: 58.0 - 58.5, SE sqrt(0.71² / 2 + 0² / 2) = 0.5.
    # Paired over 2 seeds: t(1) = -1, p = 1 - 2 atan(1) / pi = 0.5; its 95 % interval
    # -0.5 ± tan(0.475 pi) x 0.5 = -0.5 ± 6.35; it detects 16.33 x 0.5 = 8.2 points at 80 %
    # power (test_significance.py checks the 16.33 by simulation).
    assert (
        "- w_ITM: -0.5 ± 0.5 (1.0 SE); paired over seeds 0, 1: -0.5 ± 0.5 (1.0 SE); "
        "paired t(1) = -1.0, p = 0.50, 95 % CI [-6.9, +5.9], detects ≥ 8.2: not "
        "significant"
    ) in lines
    # The paper's ordering (w_ITM above w/o w_ITM, 75.8 vs 75.3), read against that gap:
    # the paper's +0.5 is under the 8.2 the test detects; one ordering: no Holm line.
    assert lines[-1] == (
        "- w_ITM above w/o w_ITM (paper 75.8 vs 75.3, +0.5): -0.5 ± 0.5 "
        "(1.0 SE), paired -0.5 ± 0.5 (1.0 SE): reversed, not significant "
        "(paired t(1) = -1.0, p = 0.50, 95 % CI [-6.9, +5.9], detects ≥ 8.2): "
        "not distinguishable at this power, the paper's +0.5 is under what it "
        "detects"
    )
    markdown_path, figure = write_table(
        TABLES["4"], rows, (0, 1), trivial, "World x.", 5400.0, tmp_path / "out"
    )
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert markdown_path.read_text().splitlines()[3] == (
        "Wall time of this table's runs (sum of the recorded runs): 1.50 h."
    )
    # The figure: per row one bar a column (VQA, NLVR2, VE, RefCOCO+ val) and Meta-Ave, at
    # the mean, with the seeds' std as error bars; the trivial rates as ticks over their group.
    (drawn,) = saved_figures
    (ax,) = drawn.axes
    bars = [c for c in ax.containers if type(c).__name__ == "BarContainer"]
    assert [c.get_label() for c in bars] == ["w/o w_ITM", "w_ITM"]
    assert [p.get_height() for p in bars[0].patches] == pytest.approx([54, 64, 66, 46, 58.5])
    assert [p.get_height() for p in bars[1].patches] == pytest.approx([52, 62, 68, 43, 58])
    assert bars[0].errorbar is None  # equal seeds: no spread to draw
    tops = [segment[1][1] for segment in bars[1].errorbar.lines[2][0].get_segments()]
    assert tops == pytest.approx(
        [52 + 2.828, 62 + 2.828, 68 + 2.828, 43 + 4.243, 58 + 0.707], abs=1e-3
    )
    centres = [[p.get_x() + p.get_width() / 2 for p in c.patches] for c in bars]
    assert centres[0] == pytest.approx([g - 0.2 for g in range(5)])
    assert centres[1] == pytest.approx([g + 0.2 for g in range(5)])
    ticks = [
        segment
        for c in ax.collections
        for segment in c.get_segments()
        if segment[0][1] == segment[1][1]
    ]  # horizontal: the error bars are vertical
    assert sorted((round(a[0], 2), round(b[0], 2), a[1]) for a, b in ticks) == [
        (0.58, 1.42, 50.0),
        (3.58, 4.42, 50.0),
    ]  # NLVR2 and the trivial Meta-Ave (NLVR2's)


def test_meta_gap_and_its_standard_error():
    def row(label, metas):
        return summarize_row(
            label,
            label,
            {
                seed: {
                    ("vqa2", "test"): v,
                    ("nlvr2", "test"): v,
                    ("visual_entailment", "test"): v,
                    ("refcoco_plus", "val"): v,
                    ("refcoco_plus", "testA"): v,
                    ("refcoco_plus", "testB"): v,
                }
                for seed, v in enumerate(metas)
            },
        )

    base, aligned = row("Base", [0.50, 0.51, 0.52]), row("Aligned", [0.56, 0.58, 0.60])
    gap = meta_gap(aligned, base)
    assert gap.difference == pytest.approx(0.07)
    assert gap.stderr == pytest.approx(math.sqrt((0.02**2 + 0.01**2) / 3))
    assert gap.ratio == pytest.approx(0.07 / gap.stderr)
    # Paired: the seeds' differences 0.06, 0.07, 0.08 -> 0.07 ± 0.01 / sqrt(3).
    assert gap.paired.seeds == (0, 1, 2)
    assert gap.paired.difference == pytest.approx(0.07)
    assert gap.paired.stderr == pytest.approx(0.01 / math.sqrt(3))
    one = meta_gap(row("One", [0.6]), base)
    assert one.ratio is None and one.paired is None
    # Two seeds shared of three: the paired mean is over seeds 0 and 1 only (0.05, 0.06).
    two = meta_gap(row("Two", [0.55, 0.57]), base)
    assert two.paired.seeds == (0, 1)
    assert two.difference == pytest.approx(0.05)
    assert two.paired.difference == pytest.approx(0.055)
    lines = gap_lines(
        [
            base,
            aligned,
            row("One", [0.6]),
            row("Same", [0.50, 0.52, 0.54]),
            row("Two", [0.55, 0.57]),
        ]
    )
    # Each gap is read by its paired t: df = n - 1, two-sided p (df 2: 1 - t / sqrt(t² + 2);
    # df 1: 1 - 2 atan(t) / pi), the 95 % interval, ± 4.3027 x SE on df 2 (t / sqrt(t² + 2)
    # = 0.95) and ± tan(0.475 pi) = 12.706 x SE on df 1, and the smallest difference detected
    # at 80 % power, 5.654 x SE on df 2 and 16.33 x SE on df 1 (the noncentral t).
    assert lines[-4:] == [
        "- Aligned: +7.0 ± 1.3 (5.4 SE); paired over seeds 0, 1, 2: +7.0 ± 0.6 (12.1 SE); "
        "paired t(2) = 12.1, p = 0.007, 95 % CI [+4.5, +9.5], detects ≥ 3.3",
        "- One: +9.0 (no standard error: one seed on a side)",
        "- Same: +1.0 ± 1.3 (0.8 SE); paired over seeds 0, 1, 2: +1.0 ± 0.6 (1.7 SE); "
        "paired t(2) = 1.7, p = 0.23, 95 % CI [-1.5, +3.5], detects ≥ 3.3: not significant",
        "- Two: +5.0 ± 1.2 (4.3 SE); paired over seeds 0, 1: +5.5 ± 0.5 (11.0 SE); "
        "paired t(1) = 11.0, p = 0.06, 95 % CI [-0.9, +11.9], detects ≥ 8.2: not significant",
    ]
    assert lines[2].startswith(
        "Each gap names its test (paired t over the shared seeds, df = "
        "n − 1; Welch's t where the rows share fewer than two), its "
        "two-sided p, the 95 % confidence interval"
    )
    assert gap_lines([base]) == []
    # With the study's pooled spread, the one-seed row is read against it: s = 2 points on
    # 24 df, SE = 2 x sqrt(1 + 1/3) = 2.31, t(24) = 9.0 / 2.31 = 3.9, 95 % interval
    # 9.0 ± 2.0639 x 2.31 = [+4.2, +13.8].
    spread = PooledSpread(0.02, 24, tuple(f"row{k}" for k in range(12)))
    pooled = gap_lines([base, row("One", [0.6])], spread)
    assert pooled[-1] == (
        "- One: +9.0 (one seed on a side); pooled-SD t(24) = 3.9, p < 0.001, "
        "95 % CI [+4.2, +13.8], detects ≥ 6.7"
    )
    assert (
        "where a row has one seed, the pooled-SD t: a Meta-Ave's seed-to-seed standard "
        "deviation pooled over the study's 12 rows with two seeds or more, 2.00 points on "
        "df = 24"
    ) in pooled[2]


def test_a_gap_is_read_by_a_t_test_with_its_p_and_the_difference_it_detects():
    """Closed forms of Student's t: two-sided p = 1 - t / sqrt(t² + 2) on df 2 and
    1 - 2 atan(t) / pi on df 1; the smallest difference detected at 80 % power and alpha
    0.05 is (t(0.975, df) + t(0.8, df)) x SE, (4.3027 + 1.0607) x SE on df 2. Rows that
    share fewer than two seeds are read by Welch's t on the Welch–Satterthwaite df."""
    two = t_test("paired", 0.02, 0.01, 2)
    assert (two.t, two.df) == (2.0, 2)
    assert two.p == pytest.approx(1 - 2 / math.sqrt(6))
    assert two.interval == pytest.approx((0.02 - 4.302653 * 0.01, 0.02 + 4.302653 * 0.01))
    assert t_test("paired", -0.02, 0.01, 1).p == pytest.approx(1 - 2 * math.atan(2) / math.pi)
    assert t_test("paired", 0.01, 0.0, 2).p == 0.0

    def row(label, metas):
        return summarize_row(
            label, label, {seed: {cell: v for cell in SEED0} for seed, v in metas.items()}
        )

    gap = meta_gap(row("A", {0: 0.52, 1: 0.56}), row("B", {2: 0.50, 3: 0.50}))
    assert gap.paired is None and gap.test.kind == "Welch"
    # s = 0.0283 and 0 over two seeds each: df = (s²/2)² / ((s²/2)² / 1) = 1.
    assert gap.test.df == pytest.approx(1.0)
    assert gap.test.t == pytest.approx(0.04 / (0.04 / math.sqrt(2) / math.sqrt(2)))
    paired = meta_gap(row("A", {0: 0.52, 1: 0.56}), row("B", {0: 0.50, 1: 0.51}))
    assert paired.test.kind == "paired" and paired.test.df == 1
    assert paired.test.t == pytest.approx(paired.paired.ratio)


def test_the_paper_s_orderings_are_read_against_the_measured_gap():
    """Each ordering the paper reports between two rows of a table: holds / reversed at
    p < 0.05, else not significant, and again with Holm's correction over the orderings
    tested; undecided or not measured where a side has one seed or none (crafted rows: the
    reading, not which system wins)."""

    def row(label, system, metas):
        return summarize_row(
            label, system, {seed: {cell: v for cell in SEED0} for seed, v in enumerate(metas)}
        )

    rows = [
        row("Base", "base", [0.50, 0.51, 0.52]),
        row("U-VisualBERT", "u_visualbert", [0.60]),
        row("Random pairs", "random_pairs", []),
        row("μ-VLA", "uvla", [0.56, 0.58, 0.60]),
        row("Aligned VLP", "aligned_vlp", [0.50, 0.53, 0.55]),
    ]
    lines = ordering_lines(TABLES["1"], rows)
    assert lines[1].startswith("The paper's orderings (Meta-Ave above − below")
    assert lines[2:] == [
        "- U-VisualBERT above Base (paper 70.0 vs 65.9, +4.1): +9.0: not decided (no standard "
        "error: one seed on a side)",
        "- Random pairs above Base (paper 68.1 vs 65.9, +2.2): not measured yet (no Meta-Ave "
        "for Random pairs)",
        # Holm over the 3 orderings tested: 3 x 0.004 = 0.012 (Aligned VLP above μ-VLA),
        # 2 x 0.007 = 0.014, 1 x 0.20.
        "- μ-VLA above Base (paper 75.8 vs 65.9, +9.9): +7.0 ± 1.3 (5.4 SE), paired +7.0 ± 0.6 "
        "(12.1 SE): holds (paired t(2) = 12.1, p = 0.007, 95 % CI [+4.5, +9.5], detects ≥ "
        "3.3); Holm over the 3 orderings tested: p = 0.01, holds",
        "- Aligned VLP above Base (paper 77.3 vs 65.9, +11.4): +1.7 ± 1.6 (1.1 SE), paired "
        "+1.7 ± 0.9 (1.9 SE): the paper's direction, not significant (paired t(2) = 1.9, "
        "p = 0.20, 95 % CI [-2.1, +5.5], detects ≥ 5.0); Holm over the 3 orderings tested: "
        "p = 0.20, the paper's direction, not significant",
        "- μ-VLA above U-VisualBERT (paper 75.8 vs 70.0, +5.8): -2.0: not decided (no "
        "standard error: one seed on a side)",
        "- μ-VLA above Random pairs (paper 75.8 vs 68.1, +7.7): not measured yet (no Meta-Ave "
        "for Random pairs)",
        "- Aligned VLP above μ-VLA (paper 77.3 vs 75.8, +1.5): -5.3 ± 1.9 (2.9 SE), paired "
        "-5.3 ± 0.3 (16.0 SE): does not hold: reversed (paired t(2) = -16.0, p = 0.004, "
        "95 % CI [-6.8, -3.9], detects ≥ 1.9); Holm over the 3 orderings tested: p = 0.01, "
        "does not hold: reversed",
        "At p < 0.05, before Holm's correction: holds: μ-VLA above Base; reversed: Aligned VLP "
        "above μ-VLA. After it, over the 3 orderings tested: holds: μ-VLA above Base; "
        "reversed: Aligned VLP above μ-VLA.",
    ]
    # Against the study's pooled spread the one-seed orderings are tested too, and join the
    # family: U-VisualBERT − Base +9.0 (pooled-SD t(24) = 3.9, p < 0.001) holds.
    spread = PooledSpread(0.02, 24, ())
    pooled = ordering_lines(TABLES["1"], rows, spread)
    assert pooled[2].startswith(
        "- U-VisualBERT above Base (paper 70.0 vs 65.9, +4.1): +9.0: "
        "holds (pooled-SD t(24) = 3.9, p < 0.001"
    )
    assert pooled[2].endswith("Holm over the 5 orderings tested: p = 0.003, holds")
    # An ordering one of whose rows the table does not show is left out; none: no section.
    assert len(ordering_lines(TABLES["1"], [rows[0], rows[3]])) == 3
    assert ordering_lines(TABLES["1"], rows[:1]) == []
    assert ordering_lines(TABLES["mix"], rows) == []


def test_no_meta_gap_between_rows_that_average_different_tasks():
    no_nlvr2 = {k: v for k, v in SEED1.items() if k[0] != "nlvr2"}
    full = summarize_row("μ-VLA", "uvla", {0: SEED0, 1: SEED1})
    partial = summarize_row("Base", "base", {0: no_nlvr2, 1: no_nlvr2})
    assert meta_gap(full, partial) is None and meta_gap(partial, full) is None
    assert gap_lines([partial, full])[-1] == (
        "- μ-VLA: — (no Meta-Ave on one side, or the two average different tasks)"
    )
    also_partial = summarize_row("Aligned", "aligned", {0: no_nlvr2, 1: no_nlvr2})
    assert meta_gap(also_partial, partial).difference == pytest.approx(0.0)


def test_a_table_s_wall_time_sums_the_recorded_runs_of_its_systems(tmp_path):
    """The wall time under a table: its systems' runs (each step.json's wall_s), not the
    world's or the corpora's, nor another table's systems; a run without one is left out."""
    from mmf_uvlp.replication.outputs import write_study

    settings = Settings(World(tmp_path / "world"), tmp_path / "runs", seeds=(0, 1))
    _fake_runs(settings, "uvla", {0: SEED0, 1: SEED1})
    _fake_runs(settings, "no_witm", {0: SEED1, 1: SEED1})
    steps = plan([SYSTEMS["uvla"], SYSTEMS["no_witm"]], settings)
    walls = {None: 5000.0, "uvla": 600.0, "no_witm": 300.0}
    for step in steps:
        step.record.parent.mkdir(parents=True, exist_ok=True)
        if step.system == "no_witm" and step.task == "vqa2" and step.seed == 1:
            continue  # an unrecorded run: no wall time
        step.record.write_text(
            json.dumps({"command": list(step.command), "wall_s": walls[step.system]})
        )
    uvla = sum(1 for s in steps if s.system == "uvla")
    no_witm = sum(1 for s in steps if s.system == "no_witm") - 1
    assert uvla == no_witm + 1 == 12 and any(s.system is None for s in steps)
    written = write_study(
        [TABLES["4"], TABLES["2"]], steps, settings, tmp_path / "out", "World x.", {}
    )
    table4, table2 = (wall_line(path.read_text()) for path in written)
    assert table4 == wall_line_of([{"system": "s", "wall_s": 12 * 600 + 11 * 300}])  # 2.92 h
    assert table2 == wall_line_of([{"system": "s", "wall_s": 12 * 600}])  # 2.00 h: μ-VLA only


def test_the_ratio_table_is_drawn_as_a_curve_over_the_rows_present(tmp_path, saved_figures):
    rows = [
        summarize_row("20%", "true_pairs_20", {0: SEED0}),
        summarize_row("80%", "true_pairs_80", {0: SEED1, 1: SEED0}),
    ]
    _, figure = write_table(
        TABLES["6"], rows, (0, 1), {("nlvr2", "test"): 0.5}, "World x.", None, tmp_path
    )
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (drawn,) = saved_figures
    (ax,) = drawn.axes
    assert not ax.patches  # no bars: one curve
    (curve,) = ax.containers  # the Meta-Ave points with their error bars
    line = curve.lines[0]
    assert list(line.get_xdata()) == [20.0, 80.0] and line.get_marker() == "o"
    # Meta-Ave: seed 0 57.5; seeds 1 and 0 of 80 %: 58.5 and 57.5 -> 58.0 ± 0.71.
    assert list(line.get_ydata()) == pytest.approx([57.5, 58.0])
    ((_, top_20), (_, top_80)) = (segment[1] for segment in curve.lines[2][0].get_segments())
    assert (top_20, top_80) == pytest.approx([57.5, 58.0 + 100 * math.sqrt(0.5) * 0.01])
    (trivial,) = [l for l in ax.lines if l.get_label() == "trivial"]
    assert trivial.get_linestyle() == "--" and list(trivial.get_ydata()) == [50.0, 50.0]
    assert list(ax.get_xticks()) == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]


# ----------------------------------------------------------------------------- trivial rates


def test_vqa_soft_score_and_best_constant_answer():
    answers = ["a"] * 7 + ["b"] * 3
    assert vqa_answer_score(answers, "a") == pytest.approx(1.0)
    # "b" with one of its own left out: 2 matches -> 2/3 (3 times); else 3 -> 1 (7 times).
    assert vqa_answer_score(answers, "b") == pytest.approx((7 + 3 * 2 / 3) / 10)
    assert vqa_answer_score(answers, "c") == 0.0
    # "yes" scores 1 + 0 and "no" 0 + 1: a tie, broken by sorted order.
    assert best_constant_vqa([["yes"] * 10, ["no"] * 10]) == "no"
    assert best_constant_vqa([["yes"] * 10, ["yes"] * 10, ["no"] * 10]) == "yes"


def test_vqa_prior_is_fitted_on_train_and_scored_on_test():
    """The per-type prior a question-only model learns: chosen on train, so a test split
    whose own best answers differ scores below its test-chosen optimum."""
    train = [
        ("presence", ["yes"] * 10),
        ("presence", ["yes"] * 10),
        ("presence", ["yes"] * 10),
        ("presence", ["no"] * 10),
        ("counting", ["2"] * 10),
        ("counting", ["3"] * 10),
        ("counting", ["2"] * 10),
    ]
    assert answer_per_type(train) == {"presence": "yes", "counting": "2", "": "yes"}
    test = [
        ("presence", ["no"] * 10),
        ("presence", ["no"] * 10),
        ("presence", ["yes"] * 10),
        ("counting", ["3"] * 10),
        ("colour", ["yes"] * 10),
    ]
    # yes: 0, 0, 1; "2" on a "3" question: 0; unseen type -> overall best "yes": 1.
    assert vqa_prior_rate(train, test) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="no VQA test questions"):
        vqa_prior_rate(train, [])


def test_majority_and_proposal_chance():
    assert majority_rate(["True", "False", "True"], ["True", "False", "True"]) == pytest.approx(
        2 / 3
    )
    # the train split's majority, not the test split's
    assert majority_rate(["True", "False", "True"], ["False", "False", "True"]) == pytest.approx(
        1 / 3
    )
    with pytest.raises(ValueError, match="no labels"):
        majority_rate([], ["True"])
    gold = torch.tensor([0.0, 0.0, 10.0, 10.0])
    proposals = torch.tensor(
        [
            [0.0, 0.0, 10.0, 10.0],
            [0.0, 0.0, 5.0, 10.0],  # IoU 1, 0.5
            [20.0, 20.0, 30.0, 30.0],
            [0.0, 0.0, 4.0, 10.0],
        ]
    )  # 0, 0.4
    assert proposal_chance(proposals, gold) == pytest.approx(2 / 4)
    assert proposal_chance(torch.zeros(0, 4), gold) == 0.0


def test_trivial_rates_of_the_tiny_world(tiny_world, skewed_world):
    """Every rate equals its recomputation by hand, on a world where fitting on the wrong
    split gives another number: VQA's per-type prior fitted on test, NLVR2's and VE's
    majority taken from test, or one RefCOCO+ split's chance for all three would differ."""
    cells = {
        ("vqa2", "test"),
        ("nlvr2", "test"),
        ("visual_entailment", "test"),
        ("refcoco_plus", "val"),
        ("refcoco_plus", "testA"),
        ("refcoco_plus", "testB"),
    }
    for world in (tiny_world, skewed_world):
        rates, expected = trivial_rates(world, 24), trivial_by_hand.by_hand(world, 24)
        assert set(rates) == cells
        for cell in cells:
            assert rates[cell] == pytest.approx(expected[cell], abs=1e-12), (world, cell)
    # The case tells right from wrong: the wrong fits give other numbers on these worlds.
    vqa_test = trivial_by_hand.typed_answers(tiny_world / trivial_by_hand.VQA.format("test"))
    assert trivial_by_hand.vqa_prior(vqa_test, vqa_test) > expected["vqa2", "test"] + 0.1
    for pattern, key, test, task in (
        (trivial_by_hand.NLVR2, "label", "test1", "nlvr2"),
        (trivial_by_hand.VE, "gold_label", "test", "visual_entailment"),
    ):
        labels = trivial_by_hand.labels(skewed_world / pattern.format(test), key)
        assert trivial_by_hand.share(trivial_by_hand.majority(labels), labels) == 0.75
        assert expected[task, "test"] == 0.25
    refcoco = [expected["refcoco_plus", split] for split in ("val", "testA", "testB")]
    assert len({round(value, 6) for value in refcoco}) == 3
    assert trivial_rates(tiny_world / "absent", 24) == {}


def test_a_verdict_follows_its_test_not_the_2_se_rule():
    """Table 5's gap, −2.6 ± 0.77 paired over three seeds: |t| = 3.4 is over 2 standard errors
    but p = 0.08 (df 2: 1 - t / sqrt(t² + 2)), so the ordering is reversed, not significant;
    the same gap at ± 0.5 (t = 5.2, p = 0.035) is reversed."""
    from mmf_uvlp.replication.aggregate import Gap, PairedGap
    from mmf_uvlp.replication.render import reading

    weak = Gap(-0.026, None, PairedGap(-0.026, 0.0077, (0, 1, 2)))
    t = 0.026 / 0.0077
    assert weak.test.p == pytest.approx(1 - t / math.sqrt(t**2 + 2))
    assert reading(weak, 0.007).startswith(
        "reversed, not significant (paired t(2) = -3.4, p = 0.08"
    )
    strong = Gap(-0.026, None, PairedGap(-0.026, 0.005, (0, 1, 2)))
    assert reading(strong, 0.007).startswith("does not hold: reversed (paired t(2) = -5.2")
    assert reading(strong, 0.007, holm_p=0.07, family=2).endswith(
        "; Holm over the 2 orderings tested: p = 0.07, reversed, not significant"
    )


def test_a_table_with_x_values_reads_the_trend_of_its_meta_aves():
    """Table 6: the slope of every seed's Meta-Ave against the share of true pairs (three seeds
    of the 0 % row, one of the others), beside the paper's slope over its six Meta-Aves
    (68.1 ... 77.3: +0.082 points per %); numpy's polyfit gives both slopes."""
    from mmf_uvlp.replication.render import trend_lines

    def row(label, system, metas):
        return summarize_row(
            label, system, {seed: {cell: v for cell in SEED0} for seed, v in metas.items()}
        )

    rows = [
        row("0%", "true_pairs_0", {0: 0.61, 1: 0.62, 2: 0.625}),
        row("20%", "true_pairs_20", {0: 0.66}),
        row("40%", "true_pairs_40", {0: 0.65}),
        row("60%", "true_pairs_60", {}),
        row("80%", "true_pairs_80", {}),
        row("100%", "true_pairs_100", {}),
    ]
    (line,) = trend_lines(TABLES["6"], rows)[1:]
    slope = np.polyfit([0, 0, 0, 20, 40], [61.0, 62.0, 62.5, 66.0, 65.0], 1)[0]
    paper = np.polyfit([0, 20, 40, 60, 80, 100], [68.1, 73.5, 74.5, 76.0, 76.8, 77.3], 1)[0]
    assert line.startswith(
        f"Trend: {slope:+.3f} Meta-Ave points per unit of true pairs (%), "
        "least squares over the 5 seeds' Meta-Aves of 3 rows; t(3) = "
    )
    assert line.endswith(f": not significant; the paper's Meta-Aves give {paper:+.3f}.")
    assert trend_lines(TABLES["6"], rows[:1]) == []  # one x: no slope
    assert trend_lines(TABLES["4"], rows) == []  # no x values
