"""The replication study: aggregation on crafted runs (hand-computed answers), trivial rates,
the study definition and its commands (the reference models' too), the runner's skip / resume /
records, and `tools/replicate.py` end to end on the tiny world (2 seeds, 2 systems; 1 seed,
Base and the three reference models)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Sequence

import pytest
import torch
import yaml

from mmf_uvlp.replication import children, runner
from mmf_uvlp.replication.archive import Archive
from mmf_uvlp.replication.aggregate import (
    meta_gap, seed_cells, summarize, summarize_row, table_rows,
)
from mmf_uvlp.replication.render import (format_stat, gap_lines, markdown, ordering_lines,
                                         write_table)
from mmf_uvlp.replication import recipe as recipe_format
from mmf_uvlp.replication.recipe import load_recipe
from mmf_uvlp.replication.runner import (StaleRun, StepFailed, prerequisites, read_record,
                                         run_steps, set_aside_previous_log, stale_reason,
                                         waiting_on)
from mmf_uvlp.replication.steps import (
    KINDS, METRICS, MMF_RUN, Settings, Step, model_overrides, plan, setup_steps, system_steps,
)
from mmf_uvlp.replication.study import (
    SYSTEMS, TABLES, TASKS, UVLA, config_datasets, config_model, select,
)
from mmf_uvlp.report.trivial import (
    answer_per_type, best_constant_vqa, majority_rate, proposal_chance, trivial_rates, vqa_answer_score,
    vqa_prior_rate,
)
from mmf_uvlp.replication.world import World
from mmf_uvlp.reference_models import REFERENCE_MODELS
from mmf_uvlp.reference_models import SYSTEMS as REFERENCE_SYSTEMS
from mmf_uvlp.toy_world import PRESETS
from mmf_uvlp.cli import replicate as replicate_cli

REPO = Path(__file__).resolve().parents[1]
PREFIX = "2026-01-01T00:00:00 | INFO | mmf.train : "


def _tool() -> ModuleType:
    return replicate_cli


def _demo() -> ModuleType:
    """``tools/demo.py``, a checkout's script rather than a console script, as a module."""
    spec = importlib.util.spec_from_file_location("demo_tool", REPO / "tools" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


SEED0 = {("vqa2", "test"): 0.50, ("nlvr2", "test"): 0.60, ("visual_entailment", "test"): 0.70,
         ("refcoco_plus", "val"): 0.40, ("refcoco_plus", "testA"): 0.50,
         ("refcoco_plus", "testB"): 0.60}
SEED1 = {("vqa2", "test"): 0.54, ("nlvr2", "test"): 0.64, ("visual_entailment", "test"): 0.66,
         ("refcoco_plus", "val"): 0.46, ("refcoco_plus", "testA"): 0.50,
         ("refcoco_plus", "testB"): 0.54}


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
    assert row.meta_note == ("mean over seed 0, the seeds with every task (left out: seed 1 "
                             "(mean of VQA, VE, RefCOCO+; missing: NLVR2))")
    assert format_stat(row.meta, len(row.seeds)) == "57.5 (n=1)"


def test_without_a_complete_seed_meta_ave_averages_the_seeds_with_the_most_tasks():
    no_nlvr2 = {k: v for k, v in SEED1.items() if k[0] != "nlvr2"}
    no_ve = {k: v for k, v in SEED0.items() if k[0] != "visual_entailment"}
    row = summarize_row("Aligned VLP", "aligned_vlp", {0: no_nlvr2, 1: no_nlvr2, 2: no_ve})
    assert sorted(row.seed_metas) == [0, 1]
    assert row.meta.mean == pytest.approx((0.54 + 0.66 + 0.50) / 3)
    assert row.meta_note == ("mean of VQA, VE, RefCOCO+; missing: NLVR2, over seeds 0, 1 "
                             "(left out: seed 2 (mean of VQA, NLVR2, RefCOCO+; missing: VE))")
    same = summarize_row("Base", "base", {0: no_nlvr2, 1: no_nlvr2})
    assert same.meta_note == "mean of VQA, VE, RefCOCO+; missing: NLVR2"
    assert same.meta.n == 2
    # More tasks beat more seeds: seed 0's three tasks, not seeds 1 and 2's RefCOCO+ alone.
    refcoco = {k: v for k, v in SEED1.items() if k[0] == "refcoco_plus"}
    fewer = summarize_row("Base", "base", {0: no_nlvr2, 1: refcoco, 2: refcoco})
    assert sorted(fewer.seed_metas) == [0]
    assert fewer.meta_note.endswith(
        ", over seed 0 (left out: seeds 1, 2 (mean of RefCOCO+; missing: VQA, NLVR2, VE))")


def _log(folder: Path, *lines: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("".join(PREFIX + line + "\n" for line in lines))


def _fake_runs(settings: Settings, system: str, values: dict) -> None:
    """MMF log lines for every run of ``system``: values[seed] = its cells."""
    for step in system_steps(SYSTEMS[system], 0, settings) + system_steps(SYSTEMS[system], 1,
                                                                         settings):
        cells = values[step.seed]
        if step.kind == "finetune" and step.task != "refcoco_plus":
            metric = "vqa_accuracy" if step.task == "vqa2" else "accuracy"
            _log(step.folder, f"progress: 4/4, val/{step.task}/{metric}: 0.9999",
                 f"progress: 4/4, test/{step.task}/{metric}: {cells[step.task, 'test']:.4f}")
        elif step.kind == "finetune":  # its val is not a table cell: the split run's is
            _log(step.folder, "progress: 4/4, val/refcoco_plus/refcoco_accuracy: 0.9999",
                 "progress: 4/4, test/refcoco_plus/refcoco_accuracy: 0.9999")
        elif step.kind == "evaluate":
            _log(step.folder, "progress: 4/4, " + ", ".join(
                f"test/refcoco_plus_{split}/refcoco_accuracy: {cells['refcoco_plus', split]:.4f}"
                for split in ("val", "testA", "testB")))
        elif step.kind == "pretrain":
            step.folder.mkdir(parents=True)
            (step.folder / "uvla_final.pth").write_bytes(b"weights")
        # what the runner writes once a run finished
        step.record.write_text(json.dumps({"title": step.title, "command": list(step.command),
                                           "wall_s": 1.0}))


def test_tables_from_crafted_run_folders(tmp_path):
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
    assert lines[7] == "| w_ITM | 52.0 ± 2.8 | 62.0 ± 2.8 | 68.0 ± 2.8 | 43.0 ± 4.2 | " \
                       "58.0 ± 0.7 | 2 |"
    # Meta-Ave of the trivial row: over NLVR2 only.
    assert lines[8] == "| *Trivial (majority / chance)* | — | 50.0 | — | — | 50.0* | – |"
    assert "- Trivial: Meta-Ave* is the mean of NLVR2; missing: VQA, VE, RefCOCO+." in lines
    # The gap to the first row: 58.0 - 58.5, SE sqrt(0.71² / 2 + 0² / 2) = 0.5.
    assert ("- w_ITM: -0.5 ± 0.5 (1.0 SE), within the noise; "
            "paired over seeds 0, 1: -0.5 ± 0.5 (1.0 SE)") in lines
    # The paper's ordering (w_ITM above w/o w_ITM, 75.8 vs 75.3), read against that gap.
    assert lines[-1] == ("- w_ITM above w/o w_ITM (paper 75.8 vs 75.3, +0.5): -0.5 ± 0.5 "
                         "(1.0 SE), paired -0.5 ± 0.5 (1.0 SE): within the noise")
    markdown_path, figure = write_table(TABLES["4"], rows, (0, 1), trivial, "World x.", 12.0,
                                        tmp_path / "out")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Wall time" in markdown_path.read_text()


def test_meta_gap_and_its_standard_error():
    def row(label, metas):
        return summarize_row(label, label, {
            seed: {("vqa2", "test"): v, ("nlvr2", "test"): v, ("visual_entailment", "test"): v,
                   ("refcoco_plus", "val"): v, ("refcoco_plus", "testA"): v,
                   ("refcoco_plus", "testB"): v} for seed, v in enumerate(metas)})

    base, aligned = row("Base", [0.50, 0.51, 0.52]), row("Aligned", [0.56, 0.58, 0.60])
    gap = meta_gap(aligned, base)
    assert gap.difference == pytest.approx(0.07)
    assert gap.stderr == pytest.approx(math.sqrt((0.02 ** 2 + 0.01 ** 2) / 3))
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
    lines = gap_lines([base, aligned, row("One", [0.6]), row("Same", [0.50, 0.52, 0.54]),
                       row("Two", [0.55, 0.57])])
    assert lines[-4:] == [
        "- Aligned: +7.0 ± 1.3 (5.4 SE); paired over seeds 0, 1, 2: +7.0 ± 0.6 (12.1 SE)",
        "- One: +9.0 (one seed: no standard error)",
        "- Same: +1.0 ± 1.3 (0.8 SE), within the noise; "
        "paired over seeds 0, 1, 2: +1.0 ± 0.6 (1.7 SE)",
        "- Two: +5.0 ± 1.2 (4.3 SE); paired over seeds 0, 1: +5.5 ± 0.5 (11.0 SE)"]
    assert gap_lines([base]) == []


def test_the_paper_s_orderings_are_read_against_the_measured_gap():
    """Each ordering the paper reports between two rows of a table: holds / does not hold at
    2 standard errors or more, else within the noise; undecided or not measured where a
    side has one seed or none (crafted rows: the reading, not which system wins)."""
    def row(label, system, metas):
        return summarize_row(label, system, {
            seed: {cell: v for cell in SEED0} for seed, v in enumerate(metas)})

    rows = [row("Base", "base", [0.50, 0.51, 0.52]),
            row("U-VisualBERT", "u_visualbert", [0.60]),
            row("Random pairs", "random_pairs", []),
            row("μ-VLA", "uvla", [0.56, 0.58, 0.60]),
            row("Aligned VLP", "aligned_vlp", [0.50, 0.53, 0.54])]
    lines = ordering_lines(TABLES["1"], rows)
    assert lines[1].startswith("The paper's orderings (Meta-Ave above − below")
    assert lines[2:] == [
        "- U-VisualBERT above Base (paper 70.0 vs 65.9, +4.1): +9.0: not decided (no standard "
        "error: one seed on a side)",
        "- Random pairs above Base (paper 68.1 vs 65.9, +2.2): not measured yet (no Meta-Ave "
        "for Random pairs)",
        "- μ-VLA above Base (paper 75.8 vs 65.9, +9.9): +7.0 ± 1.3 (5.4 SE), paired +7.0 ± 0.6 "
        "(12.1 SE): holds",
        "- Aligned VLP above Base (paper 77.3 vs 65.9, +11.4): +1.3 ± 1.3 (1.0 SE), paired "
        "+1.3 ± 0.7 (2.0 SE): within the noise",
        "- μ-VLA above U-VisualBERT (paper 75.8 vs 70.0, +5.8): -2.0: not decided (no "
        "standard error: one seed on a side)",
        "- μ-VLA above Random pairs (paper 75.8 vs 68.1, +7.7): not measured yet (no Meta-Ave "
        "for Random pairs)",
        "- Aligned VLP above μ-VLA (paper 77.3 vs 75.8, +1.5): -5.7 ± 1.7 (3.4 SE), paired "
        "-5.7 ± 0.3 (17.0 SE): does not hold (reversed)"]
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
        "- μ-VLA: — (no Meta-Ave on one side, or the two average different tasks)")
    also_partial = summarize_row("Aligned", "aligned", {0: no_nlvr2, 1: no_nlvr2})
    assert meta_gap(also_partial, partial).difference == pytest.approx(0.0)


def test_the_ratio_table_is_drawn_as_a_curve_over_the_rows_present(tmp_path):
    rows = [summarize_row("20%", "true_pairs_20", {0: SEED0}),
            summarize_row("80%", "true_pairs_80", {0: SEED1})]
    _, figure = write_table(TABLES["6"], rows, (0,), {}, "World x.", None, tmp_path)
    assert figure.stat().st_size > 1000


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
    train = [("presence", ["yes"] * 10), ("presence", ["yes"] * 10),
             ("presence", ["yes"] * 10), ("presence", ["no"] * 10), ("counting", ["2"] * 10), ("counting", ["3"] * 10),
             ("counting", ["2"] * 10)]
    assert answer_per_type(train) == {"presence": "yes", "counting": "2", "": "yes"}
    test = [("presence", ["no"] * 10), ("presence", ["no"] * 10), ("presence", ["yes"] * 10),
            ("counting", ["3"] * 10), ("colour", ["yes"] * 10)]
    # yes: 0, 0, 1; "2" on a "3" question: 0; unseen type -> overall best "yes": 1.
    assert vqa_prior_rate(train, test) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="no VQA test questions"):
        vqa_prior_rate(train, [])


def test_majority_and_proposal_chance():
    assert majority_rate(["True", "False", "True"], ["True", "False", "True"]) == \
        pytest.approx(2 / 3)
    # the train split's majority, not the test split's
    assert majority_rate(["True", "False", "True"], ["False", "False", "True"]) == \
        pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no labels"):
        majority_rate([], ["True"])
    gold = torch.tensor([0.0, 0.0, 10.0, 10.0])
    proposals = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 5.0, 10.0],  # IoU 1, 0.5
                              [20.0, 20.0, 30.0, 30.0], [0.0, 0.0, 4.0, 10.0]])  # 0, 0.4
    assert proposal_chance(proposals, gold) == pytest.approx(2 / 4)
    assert proposal_chance(torch.zeros(0, 4), gold) == 0.0


def test_trivial_rates_of_the_tiny_world(tiny_world):
    rates = trivial_rates(tiny_world, 24)
    assert set(rates) == {("vqa2", "test"), ("nlvr2", "test"), ("visual_entailment", "test"),
                          ("refcoco_plus", "val"), ("refcoco_plus", "testA"),
                          ("refcoco_plus", "testB")}
    train, test = ([json.loads(line)["label"] for line in
                    (tiny_world / f"mmf/nlvr2/annotations/{name}.jsonl").read_text().splitlines()]
                   for name in ("train", "test1"))
    majority = max(sorted(set(train)), key=train.count)
    assert rates["nlvr2", "test"] == test.count(majority) / len(test)
    assert all(0 < value < 1 for value in rates.values())
    assert trivial_rates(tiny_world / "absent", 24) == {}


# ----------------------------------------------------------------------------- study and steps

def test_selection_follows_the_tables():
    tables, systems = select("1")
    assert [s.key for s in systems] == ["base", "u_visualbert", "random_pairs", "uvla",
                                       "aligned_vlp", "visual_bert", "vilbert", "vl_bert"]
    assert [label for label, _ in tables[0].rows][5:] == ["VisualBERT", "ViLBERT", "VL-BERT"]
    tables, systems = select(None, "uvla,base")
    assert [t.key for t in tables] == ["1", "2", "4", "mix"]  # the tables holding either system
    assert [s.key for s in systems] == ["base", "uvla"]
    tables, systems = select(None, "vl_bert,base")  # the reference models are Table 1's only
    assert [t.key for t in tables] == ["1"]
    assert [s.key for s in systems] == ["base", "vl_bert"]
    assert all(SYSTEMS[key].model is REFERENCE_SYSTEMS[key] for key in REFERENCE_MODELS)
    assert all(s.model is UVLA for s in SYSTEMS.values() if s.key not in REFERENCE_MODELS)
    with pytest.raises(ValueError, match=r"--tables: unknown \['7'\]"):
        select("1,7")
    with pytest.raises(ValueError, match=r"--systems: unknown \['uvla2'\]"):
        select(None, "uvla2")
    with pytest.raises(ValueError, match=r"\['topk1'\] are in none of the tables \['1'\]"):
        select("1", "topk1")


def test_every_system_config_exists_and_trains_on_its_data():
    for system in SYSTEMS.values():
        if system.config is not None:
            assert config_datasets(system.config), system.key
            # the proof of a finished pre-training is the file MMF writes: <model>_final.pth
            assert f"{config_model(system.config)}_final.pth" == system.model.final_weights
        for task in TASKS:
            assert (REPO / system.model.finetune(task)).is_file(), (system.key, task)
    assert config_datasets(SYSTEMS["visual_bert"].config) == ["masked_aligned_vlp"]
    assert config_datasets(SYSTEMS["vl_bert"].config) == ["aligned_vlp", "u_visualbert_text"]
    assert config_model(SYSTEMS["visual_bert"].model.finetune("vqa2")) == "visual_bert"
    with pytest.raises(ValueError, match=r"toy_world/vqa2\.yaml: no model: key"):
        config_model("configs/datasets/toy_world/vqa2.yaml")
    assert config_datasets(SYSTEMS["u_visualbert"].config) == ["u_visualbert_text",
                                                               "u_visualbert_image"]
    assert config_datasets(SYSTEMS["topk10"].config) == ["uvla_region_tag", "uvla_region_phrase",
                                                         "uvla_image_sentence"]
    # Table 5: round-robin reads the caption corpus, the text the joint run draws from.
    import yaml

    joint = yaml.safe_load((REPO / SYSTEMS["true_pairs_0"].config).read_text())
    round_robin = yaml.safe_load((REPO / SYSTEMS["round_robin"].config).read_text())
    text = round_robin["dataset_config"]["u_visualbert_text"]["annotations"]["train"]
    assert text == joint["dataset_config"]["random_pairs"]["sentences"] == \
        ["text/caption_corpus.txt"]


def test_the_commands_of_a_study(tmp_path):
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(world, tmp_path / "runs", seeds=(0, 1), pretrain_updates=40,
                        finetune_updates=12, model_overrides=("model_config.uvla.x=1",))
    steps = plan([SYSTEMS["base"], SYSTEMS["uvla"], SYSTEMS["rt"], SYSTEMS["topk1"]], settings)
    kinds = [s.kind for s in steps]
    assert set(kinds) == set(KINDS)
    assert kinds[:3] == ["world", "corpus", "corpus"]
    assert [s.folder.name for s in steps[1:3]] == ["corpus", "corpus_k10"]  # each corpus once
    assert "--k" in steps[2].command and "10" in steps[2].command
    # Base: 4 fine-tunings + the splits; the others also pre-train; per seed.
    assert kinds.count("pretrain") == 3 * 2 and kinds.count("finetune") == 4 * 4 * 2
    assert kinds.count("evaluate") == 4 * 2
    for step in steps[3:]:
        assert step.command[0] == MMF_RUN and "model_config.uvla.x=1" in step.command
        assert f"env.data_dir={world.path}" in step.command
        assert "model_config.uvla.feature_dim=64" in step.command
        if step.kind != "evaluate":
            assert f"training.seed={step.seed}" in step.command  # pre-training and fine-tuning
            assert "checkpoint.resume=True" in step.command
    base_vqa = next(s for s in steps if s.system == "base" and s.task == "vqa2" and s.seed == 1)
    assert "model_config.uvla.pretrained_checkpoint=None" in base_vqa.command
    assert "training.max_updates=12" in base_vqa.command
    uvla = [s for s in steps if s.system == "uvla" and s.seed == 1]
    assert uvla[0].kind == "pretrain" and "config=projects/uvla/pretrain.yaml" in uvla[0].command
    assert "training.max_updates=40" in uvla[0].command
    assert "dataset_config.uvla_region_phrase.holdout_every=6" in uvla[0].command  # tiny world
    assert f"model_config.uvla.pretrained_checkpoint={uvla[0].folder / 'uvla_final.pth'}" \
        in uvla[1].command
    assert all(f"config=projects/uvla/finetune/{t}.yaml" in s.command
               for t, s in zip(TASKS, uvla[1:5]))
    splits = uvla[5]
    assert f"checkpoint.resume_file={uvla[4].folder / 'current.ckpt'}" in splits.command
    assert "datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB" in splits.command
    assert uvla[4].folder / "current.ckpt" not in uvla[4].prune  # the splits read it
    assert splits.prune == (uvla[4].folder / "current.ckpt",)


TINY_MODELS = tuple(f"configs/models/{model}/tiny_random.yaml"
                    for model in ("uvla", *REFERENCE_MODELS))


def _tiny_overrides() -> tuple[str, ...]:
    return tuple(option for path in TINY_MODELS for option in model_overrides(path))


@pytest.mark.parametrize("key", REFERENCE_MODELS)
def test_the_commands_of_a_reference_model_system(tmp_path, key):
    """Its own pre-training and fine-tuning configs, fine-tuning from its own final weights,
    split inference on the fine-tuned checkpoint, its feature size key and only its own
    section of the model overrides; the same schedule and seeds as the uvla systems."""
    seed_system = REFERENCE_SYSTEMS[key]
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(world, tmp_path / "runs", seeds=(0, 1), pretrain_updates=40,
                        finetune_updates=12, model_overrides=_tiny_overrides())
    steps = system_steps(SYSTEMS[key], 1, settings)
    uvla = system_steps(SYSTEMS["aligned_vlp"], 1, settings)
    assert [s.kind for s in steps] == [s.kind for s in uvla] == \
        ["pretrain", "finetune", "finetune", "finetune", "finetune", "evaluate"]
    own = [o for o in settings.model_overrides
           if o.startswith(f"model_config.{seed_system.model_section}.")]
    assert own and len(own) < len(settings.model_overrides)
    for step, reference in zip(steps, uvla):
        assert step.command[0] == MMF_RUN and step.seed == 1 and step.system == key
        assert f"env.data_dir={world.path}" in step.command
        assert f"{seed_system.feature_dim_key}=64" in step.command
        assert step.command[-len(own):] == tuple(own)  # its section, no other model's
        assert not any(a.startswith("model_config.uvla.") for a in step.command)
        schedule = [a for a in reference.command if a.startswith(("training.", "scheduler."))]
        assert schedule == [a for a in step.command if a.startswith(("training.", "scheduler."))]
    pretrain, finetunes, splits = steps[0], steps[1:5], steps[5]
    weights = pretrain.folder / seed_system.final_weights
    assert pretrain.folder == tmp_path / "runs" / key / "seed1" / "pretrain"
    assert f"config={seed_system.pretrain_config}" in pretrain.command
    assert f"env.save_dir={pretrain.folder}" in pretrain.command
    assert pretrain.proof_file == weights and pretrain.proof_keys == ()
    assert weights not in pretrain.prune and pretrain.folder / "current.ckpt" in pretrain.prune
    for name in config_datasets(seed_system.pretrain_config):  # tiny world: holdout
        assert f"dataset_config.{name}.holdout_every=6" in pretrain.command
    for task, step in zip(TASKS, finetunes):
        assert step.task == task
        assert f"config={seed_system.finetune(task)}" in step.command
        assert all(a in step.command for a in seed_system.start_from(weights))
        assert "run_type=train_inference" in step.command
        assert step.proof_keys == (f"test/{task}/{METRICS[task]}",)
        final = step.folder / f"{config_model(seed_system.finetune(task))}_final.pth"
        assert final in step.prune and step.folder / "models" in step.prune
        assert (step.folder / "current.ckpt" in step.prune) == (task != "refcoco_plus")
    checkpoint = finetunes[3].folder / "current.ckpt"
    assert f"config={seed_system.finetune('refcoco_plus')}" in splits.command
    assert all(a in splits.command for a in seed_system.evaluate_from(checkpoint))
    assert "run_type=inference" in splits.command
    assert "datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB" in splits.command
    assert splits.needs == checkpoint and splits.prune == (checkpoint,)
    assert splits.proof_keys == tuple(f"test/refcoco_plus_{view}/refcoco_accuracy"
                                      for view in ("val", "testA", "testB"))


def test_how_the_reference_models_load_their_weights(tmp_path):
    settings = Settings(World(tmp_path / "w"), tmp_path / "runs", seeds=(0,))
    visual_bert, vl_bert = (system_steps(SYSTEMS[key], 0, settings)
                            for key in ("visual_bert", "vl_bert"))
    weights = tmp_path / "runs/visual_bert/seed0/pretrain/visual_bert_uvlp_final.pth"
    assert visual_bert[0].proof_file == weights
    assert visual_bert[1].command[visual_bert[1].command.index(
        f"checkpoint.resume_file={weights}") + 1] == "checkpoint.resume_pretrained=True"
    assert "config=projects/baselines/visual_bert/vqa2.yaml" in visual_bert[1].command
    # MMF's visual_bert fine-tunes VQA2 (visual_bert_final.pth), visual_bert_uvlp RefCOCO+
    assert visual_bert[1].folder / "visual_bert_final.pth" in visual_bert[1].prune
    assert visual_bert[4].folder / "visual_bert_uvlp_final.pth" in visual_bert[4].prune
    assert not any(a.startswith("model_config.visual_bert.pretrained") for s in visual_bert
                   for a in s.command)
    weights = tmp_path / "runs/vl_bert/seed0/pretrain/vl_bert_final.pth"
    assert f"model_config.vl_bert.pretrained_checkpoint={weights}" in vl_bert[2].command
    assert "model_config.vl_bert.pretrained_checkpoint=None" in vl_bert[5].command
    checkpoint = tmp_path / "runs/vl_bert/seed0/refcoco_plus/current.ckpt"
    assert f"checkpoint.resume_file={checkpoint}" in vl_bert[5].command
    # a world without world.json and preset: the configs' own feature size
    assert not any("feature_dim" in a for s in vl_bert for a in s.command)


def _compose(command: tuple[str, ...]):
    """MMF's configuration of an ``mmf_run`` command (as ``tests/test_reference_models.py``)."""
    import argparse

    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    previous = registry.get("config", no_warning=True)
    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    try:
        args = argparse.Namespace(config_override=None, opts=list(command[1:]))
        return Configuration(args).get_config()
    finally:
        registry.register("config", previous)


@pytest.mark.parametrize("key", REFERENCE_MODELS)
def test_mmf_takes_a_reference_models_commands_with_the_tiny_overrides(tmp_path, key):
    """Every key of the tiny model files exists in MMF's config of that model (MMF refuses
    command-line keys its config lacks) and reaches the model each command builds."""
    settings = Settings(World(tmp_path / "toy_world_tiny", "tiny"), tmp_path / "runs",
                        seeds=(0,), tasks=("vqa2", "refcoco_plus"),
                        model_overrides=_tiny_overrides())
    for step in system_steps(SYSTEMS[key], 0, settings):
        config = _compose(step.command)
        node = config.model_config[config.model]
        hidden = node.bert_config.hidden_size if key == "vl_bert" else node.hidden_size
        assert hidden == 32, step.title
        assert node.bert_model_name is None, step.title


def test_demo_chain_pretrains_uvla_and_aligned_vlp_and_fine_tunes_three_rows(tmp_path):
    """make demo: the world, the study's corpus, μ-VLA and Aligned VLP pre-training, then
    each of Base, μ-VLA and Aligned VLP fine-tuned on the four tasks from its own weights,
    each fine-tuning after its system's pre-training only."""
    demo = _demo()
    steps = demo.Demo(tmp_path, 0, 4, 2).steps(list(demo.STEPS))
    world = World((tmp_path / "toy_world_demo").resolve(), "demo")
    assert [s.kind for s in steps[:2]] == ["world", "corpus"]
    assert list(steps[0].command) == world.generate_command(0)
    seeded = demo.Demo(tmp_path, 3, 4, 2).steps(["toy-world"])[0]
    assert list(seeded.command) == world.generate_command(3) and "3" in seeded.command
    assert list(steps[1].command) == world.corpus_command("corpus")
    weights = {s.system: s.proof_file for s in steps if s.kind == "pretrain"}
    runs = (tmp_path / "runs").resolve()
    assert weights == {"uvla": runs / "uvla_pretrain/uvla_final.pth",
                       "aligned_vlp": runs / "aligned_vlp_pretrain/uvla_final.pth"}
    # where the fine-tuning configs look for the μ-VLA weights by default
    defaults = yaml.safe_load((REPO / "projects/uvla/finetune/defaults.yaml").read_text())
    assert defaults["model_config"]["uvla"]["pretrained_checkpoint"] == \
        "data/runs/uvla_pretrain/uvla_final.pth"
    finetunes = [s for s in steps if s.kind == "finetune"]
    assert sorted((s.system, s.task) for s in finetunes) == sorted(
        (system, task) for system in ("base", "uvla", "aligned_vlp") for task in TASKS)
    for step in finetunes:
        start = f"model_config.uvla.pretrained_checkpoint={weights.get(step.system)}"
        assert start in step.command, step.title
        assert "training.max_updates=2" in step.command, step.title
    needs = prerequisites(steps)
    for i, step in enumerate(steps):
        if step.kind == "finetune":
            waits = {steps[j].system for j in needs[i] if steps[j].kind == "pretrain"}
            assert waits == ({step.system} if step.system in weights else set()), step.title
    assert [s.system for s in steps if s.kind == "evaluate"] == ["base", "uvla", "aligned_vlp"]


def test_side_by_side_runs_share_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 8)
    runner.share_cores(1)  # pinned for one job too: the count is part of a run's identity
    assert runner.os.environ["OMP_NUM_THREADS"] == "8" and runner.threads() == 8
    monkeypatch.delenv("OMP_NUM_THREADS")
    runner.share_cores(3)
    assert runner.os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # a user's setting wins
    runner.share_cores(2)
    assert runner.os.environ["OMP_NUM_THREADS"] == "5"
    monkeypatch.delenv("OMP_NUM_THREADS")
    runner.share_cores(16)  # never fewer than one thread
    assert runner.os.environ["OMP_NUM_THREADS"] == "1"


def test_demo_steps_option_selects_the_chain_s_part(tmp_path):
    demo = _demo()
    d = demo.Demo(tmp_path, 0, 4, 2)
    assert [s.kind for s in d.steps(["toy-world", "corpus"])] == ["world", "corpus"]
    assert {s.kind for s in d.steps(["pretrain"])} == {"pretrain"}
    assert d.steps(["report"]) == []


def test_demo_ends_with_the_calibrated_study_s_recorded_runs(tmp_path):
    """make demo's last step: Table 1's three rows on the calibrated world, trained by nobody
    in this call (replicate --recorded) but read from the committed archive."""
    demo = _demo().Demo(tmp_path, 0, 4, 2)
    command = demo.calibrated_command()
    assert command[1] == "tools/replicate.py"
    args = _tool().parse_args(command[2:])
    assert args.recorded and not args.plan
    assert args.recipe == Path("configs/study/calibrated.yaml")
    assert args.archive == Path("results/archive/calibrated") and (REPO / args.archive).is_dir()
    assert args.systems == "base,uvla,aligned_vlp" and args.tables == "1"
    assert args.data == tmp_path.resolve()
    assert demo.steps(["calibrated"]) == []  # no training step of the demo world's


def test_the_committed_calibrated_archive_matches_the_recipe(tmp_path, capsys):
    """Every run in results/archive/calibrated was made by the command the calibrated recipe
    plans now: a change to the recipe or to a config it reads shows here, not as a table
    that mixes settings."""
    archive = tmp_path / "archive"
    shutil.copytree(REPO / "results" / "archive" / "calibrated", archive)
    records = len(list(archive.rglob("*.json")))  # step.json of each run, setup/*.json
    assert _tool().main(["--recipe", "configs/study/calibrated.yaml", "--tables", "1",
                         "--systems", "base,uvla,aligned_vlp", "--data", str(tmp_path),
                         "--archive", str(archive), "--plan"]) == 0
    printed = capsys.readouterr().out
    assert "stale" not in printed
    assert f"{records} finished steps restored" in printed  # each record is a planned step


def test_corpus_command_is_the_same_before_and_after_the_world_is_generated(tmp_path):
    """The study plans its steps before it generates a preset world: the corpus command must
    not change once the world exists, or a resumed study refuses its own finished corpus."""
    world = World(tmp_path / "toy_world_demo", "demo")
    planned = world.corpus_command("corpus")
    (world.path / "images_gt").mkdir(parents=True)
    (world.path / "images_gt/cc.jsonl").write_text("")
    assert world.corpus_command("corpus") == planned
    assert "--objects-gt" in planned


def test_model_config_becomes_command_line_overrides():
    assert model_overrides("configs/models/uvla/tiny_random.yaml") == (
        "model_config.uvla.bert_model_name=None",
        "model_config.uvla.bert_config.hidden_size=32",
        "model_config.uvla.bert_config.num_hidden_layers=1",
        "model_config.uvla.bert_config.num_attention_heads=2",
        "model_config.uvla.bert_config.intermediate_size=64",
    )
    vilbert = model_overrides("configs/models/vilbert/tiny_random.yaml")
    assert vilbert[-2:] == ("model_config.vilbert.t_biattention_id=[1]",
                            "model_config.vilbert.v_biattention_id=[0]")  # list literals


def test_model_config_errors_name_the_file_and_key(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("model_config:\n  uvla: {bert_model_name: null}\n  mmbt: {x: 1}\n")
    with pytest.raises(ValueError, match=r"model\.yaml: model_config sections \['mmbt'\] belong "
                                         r"to no model of the study; expected sections from "
                                         r"\['uvla', 'vilbert', 'visual_bert', 'vl_bert'\]"):
        model_overrides(path)
    path.write_text("model_config:\n  vl_bert:\n    heads: [{a: 1}]\n")
    with pytest.raises(ValueError, match=r"model_config\.vl_bert\.heads: only scalar values"):
        model_overrides(path)
    path.write_text("model: uvla\n")
    with pytest.raises(ValueError, match="expected a yaml with a model_config mapping"):
        model_overrides(path)


def test_a_recipe_sets_the_world_schedules_and_per_task_options(tmp_path):
    recipe = load_recipe(REPO / "configs/study/calibrated.yaml", TASKS)
    assert recipe.world == "calibrated" and recipe.pretrain_updates == 5000
    world = World.resolve(recipe.world, tmp_path)  # a preset: generated when missing
    assert world.path == tmp_path / "toy_world_calibrated" and world.feature_dim == 128
    settings = Settings(World(tmp_path / "w"), tmp_path / "runs", seeds=(0,),
                        pretrain_updates=recipe.pretrain_updates,
                        finetune_updates=recipe.finetune_updates,
                        pretrain_options=recipe.pretrain_options,
                        finetune_options=recipe.finetune_options,
                        task_options=recipe.task_options)
    kldiv = "model_config.uvla.losses=[{'type':'softmax_kldiv'}]"
    aligned = system_steps(SYSTEMS["aligned_vlp"], 0, settings)
    pretrain, vqa, nlvr2 = aligned[:3]
    entailment = next(step for step in aligned if step.task == "visual_entailment")
    referring = [step for step in aligned if step.task.startswith("refcoco_plus")]
    assert "optimizer.params.lr=3e-4" in pretrain.command and kldiv not in pretrain.command
    mean = "model_config.uvla.pooling=mean"
    assert all(mean in step.command for step in (pretrain, vqa, nlvr2, entailment))
    assert len(referring) == 2 and not any(mean in step.command for step in referring)
    assert not any("vl_bert" in option for option in entailment.command)
    assert "training.max_updates=5000" in pretrain.command
    assert "optimizer.params.lr=3e-4" in vqa.command and kldiv in vqa.command
    assert kldiv not in nlvr2.command and "training.max_updates=1500" in nlvr2.command
    # the recipe's lr comes after the schedule's options; a model_config option reaches only
    # its own model's runs
    assert vqa.command.index("optimizer.params.lr=3e-4") > vqa.command.index("checkpoint.resume=True")
    visual_bert_vqa = system_steps(SYSTEMS["visual_bert"], 0, settings)[1]
    assert "optimizer.params.lr=3e-4" in visual_bert_vqa.command
    vl_bert_entailment = next(step for step in system_steps(SYSTEMS["vl_bert"], 0, settings)
                              if step.task == "visual_entailment")
    assert "model_config.vl_bert.pooling=mean" in vl_bert_entailment.command
    assert mean not in vl_bert_entailment.command
    assert kldiv not in visual_bert_vqa.command
    assert _compose(vqa.command).model_config.uvla.losses[0].type == "softmax_kldiv"
    # NLVR2 and VE fine-tune at the task's own lr (it comes after the shared one and wins)
    assert [_compose(step.command).optimizer.params.lr for step in (vqa, nlvr2, entailment)] \
        == [3e-4, 1e-4, 1e-4]


@pytest.mark.parametrize("text, message", [
    ("pretrain: {updates: 0}", r"pretrain\.updates: expected an integer >= 1, got 0"),
    ("finetune: {evaluations: true}", r"finetune\.evaluations: expected an integer >= 1, "
                                      r"got True"),
    ("finetune: {tasks: {gqa: [a=1]}}", r"finetune\.tasks: unknown tasks \['gqa'\]"),
    ("finetune: {options: [lr]}", r"finetune\.options: expected a list of mmf_run options"),
    ("pretrain: {lr: 1}", r"pretrain: unknown keys \['lr'\]; expected keys from "
                          r"\['updates', 'options'\]"),
    ("seeds: 3", r"top level: unknown keys \['seeds'\]"),
    ("finetune: {tasks: {nlvr2: {updates: -3}}}", r"finetune\.tasks\.nlvr2\.updates: expected "
                                                 r"an integer >= 1, got -3"),
    ("finetune: {tasks: {nlvr2: {lr: 1}}}", r"finetune\.tasks\.<task>: unknown keys \['lr'\]"),
    ("finetune: {tasks: {nlvr2: {options: lr}}}", r"finetune\.tasks\.nlvr2\.options: expected a "
                                                 r"list"),
    ("[1, 2]", r"the file: expected a mapping, got list"),
])
def test_recipe_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "recipe.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=r"recipe\.yaml: " + message):
        load_recipe(path, TASKS)
    with pytest.raises(FileNotFoundError, match="--recipe: cannot read"):
        load_recipe(tmp_path / "missing.yaml", TASKS)


def test_replicate_plans_a_recipe_s_world_and_keeps_its_runs_apart(tmp_path, capsys):
    recipe = tmp_path / "short.yaml"
    recipe.write_text("world: tiny\nfinetune: {updates: 7, options: [optimizer.params.lr=1e-3]}\n")
    args = ["--recipe", str(recipe), "--data", str(tmp_path), "--systems", "base", "--seeds", "1",
            "--tasks", "nlvr2", "--plan"]
    assert _tool().main(args) == 0
    out = capsys.readouterr().out
    assert f"env.save_dir={tmp_path}/replication/toy_world_tiny__short/base/seed0/nlvr2" in out
    assert "training.max_updates=7" in out and "optimizer.params.lr=1e-3" in out
    assert _tool().main([*args, "--finetune-updates", "9"]) == 0
    assert "training.max_updates=9" in capsys.readouterr().out  # the command line wins


def test_only_seeds_plans_those_seeds_and_refuses_others(tmp_path, capsys):
    args = ["--world", "tiny", "--data", str(tmp_path), "--systems", "base", "--seeds", "3",
            "--tasks", "nlvr2", "--plan"]
    assert _tool().main([*args, "--only-seeds", "2,1"]) == 0
    out = capsys.readouterr().out
    assert "base/seed1/nlvr2" in out and "base/seed2/nlvr2" in out
    assert "base/seed0/nlvr2" not in out
    assert _tool().main([*args, "--only-seeds", "3"]) == 2
    assert "--only-seeds 3: expected seeds of 0..2 (--seeds 3)" in capsys.readouterr().err
    for bad in ("x", "-1", ","):
        with pytest.raises(SystemExit):
            _tool().main([*args, "--only-seeds", bad])
        assert "expected comma-separated seeds >= 0" in capsys.readouterr().err


def test_a_recipe_gives_one_task_its_own_updates(tmp_path, capsys):
    recipe = tmp_path / "long_nlvr2.yaml"
    recipe.write_text("world: tiny\nfinetune:\n  updates: 10\n  tasks:\n"
                      "    nlvr2: {updates: 30, options: [a.b=1]}\n    vqa2: [c.d=2]\n")
    loaded = load_recipe(recipe, TASKS)
    assert loaded.task_updates == (("nlvr2", 30),)
    assert loaded.task_options == (("nlvr2", ("a.b=1",)), ("vqa2", ("c.d=2",)))
    settings = Settings(World(tmp_path / "w"), tmp_path / "runs", seeds=(0,),
                        finetune_updates=10, task_updates=loaded.task_updates,
                        task_options=loaded.task_options)
    steps = {step.task: step for step in system_steps(SYSTEMS["base"], 0, settings)}
    nlvr2, vqa = steps["nlvr2"].command, steps["vqa2"].command
    # the schedule follows the task's updates: 10 % warm-up, checkpoints and the evaluation
    assert {"training.max_updates=30", "scheduler.params.num_warmup_steps=3",
            "training.evaluation_interval=30", "training.checkpoint_interval=15",
            "a.b=1"} <= set(nlvr2)
    assert {"training.max_updates=10", "scheduler.params.num_warmup_steps=1",
            "c.d=2"} <= set(vqa) and "a.b=1" not in vqa
    args = ["--recipe", str(recipe), "--data", str(tmp_path), "--systems", "base", "--seeds",
            "1", "--tasks", "nlvr2,vqa2", "--plan"]
    assert _tool().main(args) == 0
    out = capsys.readouterr().out
    assert "training.max_updates=30" in out and "training.max_updates=10" in out
    assert _tool().main([*args, "--finetune-updates", "9"]) == 0
    out = capsys.readouterr().out  # the command line sets every task's
    assert "training.max_updates=9" in out and "training.max_updates=30" not in out


def _keys(data: dict, section: str = "") -> set[tuple[str, str]]:
    """(section, key) of every key a recipe uses, in recipe._KEYS's names."""
    found = set()
    for key, value in data.items():
        found.add((section, key))
        if section == "finetune" and key == "tasks":
            for options in value.values():
                if isinstance(options, dict):
                    found |= _keys(options, "finetune.tasks.<task>")
        elif isinstance(value, dict):
            found |= _keys(value, key)
    return found


def test_every_recipe_option_reaches_the_planned_commands(tmp_path, capsys):
    """A recipe with every key the format has (a key added to the format without a case here
    fails), through `replicate --plan` on the tiny world."""
    text = ("world: tiny\n"
            "pretrain: {updates: 6, options: [optimizer.params.lr=2e-4]}\n"
            "finetune:\n"
            "  updates: 8\n"
            "  evaluations: 2\n"
            "  options: [optimizer.params.lr=1e-3]\n"
            "  tasks:\n"
            "    nlvr2: {updates: 12, options: [model_config.uvla.pooling=mean]}\n"
            "    vqa2: [\"model_config.uvla.losses=[{'type':'softmax_kldiv'}]\"]\n")
    recipe = tmp_path / "every.yaml"
    recipe.write_text(text)
    assert _keys(yaml.safe_load(text)) == {(section, key) for section, keys in
                                           recipe_format._KEYS.items() for key in keys}
    assert _tool().main(["--recipe", str(recipe), "--data", str(tmp_path), "--systems", "uvla",
                         "--seeds", "1", "--tasks", "vqa2,nlvr2,refcoco_plus", "--plan"]) == 0
    out = capsys.readouterr().out
    commands = {line.split("env.save_dir=")[1].split()[0].rsplit("/", 1)[1]: line.split()
                for line in out.splitlines() if "env.save_dir=" in line}
    world = tmp_path / "toy_world_tiny"
    assert f"--out {world} " in out  # world: the tiny preset, made in --data
    assert all(f"env.data_dir={world}" in command for command in commands.values())
    assert {"training.max_updates=6", "optimizer.params.lr=2e-4",
            "training.evaluation_interval=6"} <= set(commands["pretrain"])
    assert "optimizer.params.lr=1e-3" not in commands["pretrain"]
    assert {"training.max_updates=12", "training.evaluation_interval=6",
            "model_config.uvla.pooling=mean", "optimizer.params.lr=1e-3"} <= set(commands["nlvr2"])
    assert {"training.max_updates=8", "training.evaluation_interval=4",
            "model_config.uvla.losses=[{'type':'softmax_kldiv'}]"} <= set(commands["vqa2"])
    assert "model_config.uvla.pooling=mean" not in commands["vqa2"]
    assert "training.max_updates=8" in commands["refcoco_plus"]
    assert any(a.endswith("refcoco_plus/best.ckpt") for a in commands["refcoco_plus_splits"])


def test_the_calibrated_recipe_plans_tables_2_and_3(tmp_path, capsys):
    """Tables 2 and 3 on the calibrated world: the granularities and μ-VLA_BC against random
    pairs on the narrative text, with the recipe's schedule and options, and the corpora
    they read."""
    assert _tool().main(["--recipe", "configs/study/calibrated.yaml", "--tables", "2,3",
                         "--seeds", "1", "--data", str(tmp_path), "--plan"]) == 0
    out = capsys.readouterr().out
    pretrainings = [line.split() for line in out.splitlines() if "/seed0/pretrain " in line]
    systems = [next(a for a in c if a.startswith("env.save_dir=")).split("/")[-3]
               for c in pretrainings]
    assert systems == ["rt", "rn", "is", "rt_rn", "uvla", "random_pairs_bc", "uvla_bc"]
    recipe = load_recipe(REPO / "configs/study/calibrated.yaml", TASKS)
    assert all({"training.max_updates=5000", *recipe.pretrain_options} <= set(c)
               for c in pretrainings)
    assert "weakly aligned corpus corpus:" in out and "weakly aligned corpus corpus_bc:" in out
    assert f"--corpus {tmp_path}/toy_world_calibrated/text/narrative_corpus.txt --out" in out
    assert out.count("fine-tune ") == 7 * 4 and "base/" not in out


def test_a_recipe_with_several_evaluations_tests_and_splits_the_best_checkpoint(tmp_path):
    path = tmp_path / "best.yaml"
    path.write_text("finetune: {updates: 1500, evaluations: 5}\n")
    recipe = load_recipe(path, TASKS)
    assert recipe.finetune_evaluations == 5
    settings = Settings(World(tmp_path / "w"), tmp_path / "runs", seeds=(0,),
                        finetune_updates=recipe.finetune_updates,
                        finetune_evaluations=recipe.finetune_evaluations)
    steps = system_steps(SYSTEMS["base"], 0, settings)
    finetunes = [step for step in steps if step.kind == "finetune"]
    assert all("training.evaluation_interval=300" in step.command for step in finetunes)
    referring, splits = steps[-2:]
    best, current = referring.folder / "best.ckpt", referring.folder / "current.ckpt"
    assert f"checkpoint.resume_file={best}" in splits.command and splits.needs == best
    assert best not in referring.prune and current in referring.prune
    assert splits.prune == (best,)
    # One evaluation, at the end (the default): the last checkpoint is the tested one.
    once = system_steps(SYSTEMS["base"], 0, replace(settings, finetune_evaluations=1))
    assert all("training.evaluation_interval=1500" in step.command
               for step in once if step.kind == "finetune")
    assert f"checkpoint.resume_file={current}" in once[-1].command


# ----------------------------------------------------------------------------- runner

def _step(tmp_path: Path, name: str, command: tuple = ("tool", "--x", "1"), **kwargs) -> Step:
    folder = tmp_path / name
    return Step("finetune", name, command, folder, folder / "step.json",
                proof_file=folder / "done", **kwargs)


def _finish(command) -> int:
    folder = Path(command[-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "done").write_text("ok")
    (folder / "current.ckpt").write_text("ckpt")
    return 0


def test_runner_skips_done_steps_records_runs_and_prunes(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    first = _step(tmp_path, "a", ("tool", str(tmp_path / "a")),
                  prune=(tmp_path / "a" / "current.ckpt",))
    second = _step(tmp_path, "b", ("tool", str(tmp_path / "b")))
    calls, lines = [], []
    assert run_steps([first, second], run=lambda c: calls.append(c) or _finish(c),
                     log=lines.append) == 2
    record = json.loads(first.record.read_text())
    assert record["command"] == list(first.command) and record["wall_s"] >= 0
    assert record["threads"] == 3
    assert not (tmp_path / "a" / "current.ckpt").exists()
    assert (tmp_path / "b" / "current.ckpt").exists()  # nothing to prune
    assert re.search(r"\[1/2\] a \| elapsed 0:00:00 \| ETA unknown", "\n".join(lines))
    assert re.search(r"\[2/2\] b \| elapsed .* \| ETA 0:00:00", "\n".join(lines))
    # Again: nothing runs.
    assert run_steps([first, second], run=lambda c: calls.append(c) or 1, log=lines.append) == 0
    assert len(calls) == 2
    # Settings changed: a finished run is not silently reused.
    changed = _step(tmp_path, "a", ("tool", str(tmp_path / "a"), "--updates", "5"))
    with pytest.raises(StaleRun, match=r"\['--updates', '5'\]"):
        run_steps([changed], run=_finish, log=lines.append)
    assert "['--updates', '5']" in stale_reason(changed, read_record(changed))
    assert stale_reason(first, read_record(first)) is None


def test_runner_runs_only_the_kinds_asked_and_still_checks_the_finished_ones(tmp_path):
    """``kinds`` (replicate --recorded): the other steps are left as they are, but a finished
    one made by another command is refused all the same."""
    world = Step("world", "world", ("tool", str(tmp_path / "w")), tmp_path / "w",
                 tmp_path / "w" / "step.json", proof_file=tmp_path / "w" / "done")
    run = _step(tmp_path, "a", ("tool", str(tmp_path / "a")))
    calls = []
    assert run_steps([world, run], run=lambda c: calls.append(c) or _finish(c),
                     log=lambda line: None, kinds=("world",)) == 1
    assert calls == [world.command] and world.done() and not run.done()
    assert run_steps([world, run], run=_finish, log=lambda line: None) == 1
    changed = _step(tmp_path, "a", ("tool", str(tmp_path / "a"), "--updates", "5"))
    with pytest.raises(StaleRun, match=r"\['--updates', '5'\]"):
        run_steps([world, changed], run=_finish, log=lambda line: None, kinds=("world",))


def test_a_world_made_with_other_settings_than_its_preset_s_is_refused(tmp_path):
    world = World(tmp_path / "toy_world_tiny", "tiny")
    step = setup_steps([], Settings(world, tmp_path / "runs"))[0]
    config = PRESETS["tiny"].to_json()
    del config["caption_style"]  # a setting added later, at its default: still this world
    world.path.mkdir()
    (world.path / "world.json").write_text(json.dumps({"config": config}))
    assert step.done() and world.drift() is None
    assert run_steps([step], run=_finish, log=lambda line: None) == 0
    (world.path / "world.json").write_text(json.dumps(
        {"config": {**config, "nlvr2_pairs": [6, 2, 2]}}))
    with pytest.raises(StaleRun, match=r"world\.json was generated with nlvr2_pairs \[6, 2, 2\] "
                                       r"where the preset now has \[16, 8, 8\]: .*move"):
        run_steps([step], run=_finish, log=lambda line: None)
    assert "seed 0 where the preset now has 3" in World(world.path, "tiny").drift(seed=3)


def test_a_run_records_the_world_settings_its_task_reads(tmp_path):
    """Each run's record keeps the preset world's settings that its files depend on: an
    NLVR2 run those of NLVR2's statements and none of another task's; pre-training none of
    a downstream task's."""
    settings = Settings(World(tmp_path / "toy_world_tiny", "tiny"), tmp_path / "runs")
    steps = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, settings)}
    nlvr2, vqa, pretrain = steps["nlvr2"], steps["vqa2"], steps["pretrain"]
    assert {"nlvr2_classes", "nlvr2_statements", "nlvr2_pairs", "num_images"} <= set(nlvr2.world)
    assert "vqa2_questions" not in nlvr2.world and "nlvr2_pairs" not in vqa.world
    assert not {"vqa2_questions", "nlvr2_pairs", "ve_hypotheses",
                "refcoco_images"} & set(pretrain.world)
    assert steps["refcoco_plus_splits"].world == steps["refcoco_plus"].world
    run_steps([nlvr2], log=lambda line: None, run=lambda command: _log(
        nlvr2.folder, "progress: 10/10, test/nlvr2/accuracy: 0.5000") or 0)
    assert read_record(nlvr2)["world"] == nlvr2.world
    assert World(tmp_path / "data", None).settings_for("nlvr2") is None


def test_a_run_made_on_a_world_with_other_task_settings_is_refused(tmp_path):
    """A finished NLVR2 run whose record says its world's NLVR2 statements named every
    class is stale once the preset names 4: refused with the setting named, while a VQA
    run of that world stays valid (its files did not change). A record that does not say
    its world (written before records kept it) is refused too."""
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(world, tmp_path / "runs")
    steps = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, settings)}
    for step, made_on in ((steps["nlvr2"], {**steps["nlvr2"].world, "nlvr2_classes": 4}),
                          (steps["vqa2"], steps["vqa2"].world)):
        step.record.parent.mkdir(parents=True)
        step.record.write_text(json.dumps({"command": list(step.command), "world": made_on}))
    assert stale_reason(steps["vqa2"], read_record(steps["vqa2"])) is None
    reason = stale_reason(steps["nlvr2"], read_record(steps["nlvr2"]))
    assert "nlvr2_classes 4 where the world now has 0" in reason and "delete" in reason
    # a setting added to worlds after the record was written counts at its default
    older = {k: v for k, v in steps["vqa2"].world.items() if k != "caption_style"}
    assert "caption_style" in steps["vqa2"].world
    assert stale_reason(steps["vqa2"], {"command": list(steps["vqa2"].command),
                                        "world": older}) is None
    legacy = {"command": list(steps["nlvr2"].command)}
    assert "does not say which world" in stale_reason(steps["nlvr2"], legacy)
    data = Settings(World(tmp_path / "data", None), tmp_path / "runs2")
    other = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, data)}["nlvr2"]
    assert stale_reason(other, {"command": list(other.command)}) is None  # no preset


def _pretrain_again(tmp_path: Path, value: str, lines: list[str]) -> Step:
    """A pre-training step that finished once (record and log, weights gone) made again by
    a command that logs ``val/x: value``."""
    checkpoint = tmp_path / "p" / "current.ckpt"
    step = _step(tmp_path, "p", ("tool", str(tmp_path / "p")), resumes_from=checkpoint,
                 prune=(checkpoint,))

    def run(command) -> int:
        step.folder.mkdir(exist_ok=True)
        with open(step.folder / "train.log", "a") as log:  # MMF appends to an existing log
            log.write(f"progress: 8/8, val/x: {value}, val/y: 0.5000\n")
        return _finish(command)

    assert run_steps([step], run=run, log=lines.append) == 1
    return step


def test_a_finished_step_made_again_writes_its_own_log_and_is_compared_with_it(tmp_path):
    lines = []
    step = _pretrain_again(tmp_path, "0.2500", lines)
    (step.folder / "done").unlink()  # its weights gone: it runs again
    _pretrain_again(tmp_path, "0.2500", lines)
    assert (step.folder / "train.log").read_text().count("progress") == 1
    assert not (step.folder / "train.previous.log").exists()
    assert lines[-2] == "=== p: made again, the same 2 val/test values as its previous run"
    (step.folder / "done").unlink()
    _pretrain_again(tmp_path, "0.7500", lines)
    assert lines[-2] == ("=== p: made again, and 1 of 2 val/test values differ from its "
                         "previous run: val/x 0.25 -> 0.75")


def test_a_step_made_again_keeps_the_log_it_resumes_or_drops_a_partial_one(tmp_path):
    step = _step(tmp_path, "p", ("tool",), resumes_from=tmp_path / "p" / "current.ckpt")
    step.folder.mkdir()
    step.record.write_text("{}")
    log, previous = step.folder / "train.log", step.folder / "train.previous.log"
    log.write_text("finished run")
    set_aside_previous_log(step)
    assert previous.read_text() == "finished run" and not log.exists()
    log.write_text("interrupted before its first checkpoint")
    set_aside_previous_log(step)
    assert previous.read_text() == "finished run" and not log.exists()
    log.write_text("interrupted after a checkpoint")
    step.resumes_from.write_text("ckpt")
    set_aside_previous_log(step)
    assert log.read_text() == "interrupted after a checkpoint"


def test_runner_stops_on_a_failed_or_impossible_step(tmp_path):
    failing = _step(tmp_path, "a", ("tool", str(tmp_path / "a")))
    with pytest.raises(StepFailed, match="exit code 3"):
        run_steps([failing], run=lambda c: 3, log=lambda line: None)
    assert not failing.record.exists()
    with pytest.raises(StepFailed, match="output is missing"):
        run_steps([failing], run=lambda c: 0, log=lambda line: None)
    needy = _step(tmp_path, "b", needs=tmp_path / "x" / "current.ckpt")
    with pytest.raises(StepFailed, match=r"delete .*x to run that fine-tuning again"):
        run_steps([needy], run=_finish, log=lambda line: None)


def test_runner_jobs_run_independent_steps_together_and_respect_prerequisites(tmp_path):
    world = _step(tmp_path, "world", ("tool", str(tmp_path / "world")))
    steps = [world]
    for system in ("base", "uvla"):
        for task in (["pretrain"] if system == "uvla" else []) + ["vqa2", "refcoco_plus"]:
            steps.append(replace(
                _step(tmp_path, f"{system}-{task}", ("tool", str(tmp_path / f"{system}-{task}"))),
                kind="pretrain" if task == "pretrain" else "finetune",
                system=system, seed=0, task=task))
        steps.append(replace(_step(tmp_path, f"{system}-splits",
                                   ("tool", str(tmp_path / f"{system}-splits"))),
                             kind="evaluate", system=system, seed=0, task="refcoco_plus_splits"))
    titles = [s.title for s in steps]
    needs = prerequisites(steps)
    assert [sorted(titles[j] for j in n) for n in needs] == [
        [], ["world"], ["world"], ["base-refcoco_plus", "world"],
        ["world"], ["uvla-pretrain", "world"], ["uvla-pretrain", "world"],
        ["uvla-pretrain", "uvla-refcoco_plus", "world"]]
    lock, active, peak, order = threading.Lock(), [0], [0], []

    def run(command, output):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("console")
        with lock:
            active[0] -= 1
            order.append(Path(command[1]).relative_to(tmp_path).as_posix())
        return _finish(command)

    assert run_steps(steps, run=run, log=lambda line: None, jobs=2) == len(steps)
    assert peak[0] == 2
    for i, step in enumerate(steps):
        position = order.index(Path(step.command[1]).relative_to(tmp_path).as_posix())
        for j in needs[i]:
            assert order.index(Path(steps[j].command[1]).relative_to(tmp_path).as_posix()) \
                < position
        assert step.record.with_suffix(".out").read_text() == "console"
    # A failure starts nothing new and names the step.
    again = [_step(tmp_path, "x", ("tool", str(tmp_path / "x")))]
    with pytest.raises(StepFailed, match="x failed \\(exit code 4\\)"):
        run_steps(again, run=lambda command, output: 4, log=lambda line: None, jobs=2)


def _chains(tmp_path: Path, units: Sequence[tuple[str, int]]) -> list[Step]:
    """VQA and NLVR2 fine-tunings of each (system, seed), after its pre-training unless Base."""
    steps = []
    for system, seed in units:
        tasks = (["pretrain"] if system != "base" else []) + ["vqa2", "nlvr2"]
        for task in tasks:
            name = f"{system}{seed}-{task}"
            steps.append(replace(_step(tmp_path, name, ("tool", str(tmp_path / name))),
                                 kind="pretrain" if task == "pretrain" else "finetune",
                                 system=system, seed=seed, task=task))
    return steps


def _started(lines: Sequence[str]) -> list[str]:
    return [re.search(r"=== \[\d+/\d+\] (\S+) \|", line).group(1)
            for line in lines if " | elapsed " in line]


def test_runner_starts_the_steps_others_wait_for_first(tmp_path):
    """Base's fine-tunings come first in the plan, but the pre-trainings of both seeds start
    before them: a waiting pre-training would leave its fine-tunings for the end."""
    steps = _chains(tmp_path, [("base", 0), ("uvla", 0), ("uvla", 1)])
    assert waiting_on(prerequisites(steps)) == [0, 0, 2, 0, 0, 2, 0, 0]
    lines = []
    assert run_steps(steps, run=lambda command, output: _finish(command), log=lines.append,
                     jobs=2) == len(steps)
    assert _started(lines)[:2] == ["uvla0-pretrain", "uvla1-pretrain"]


def test_runner_finishes_a_pre_training_s_fine_tunings_before_the_next_pre_training(tmp_path):
    """A pre-training's weights may not outlive the session (a study restored from its archive
    makes them again): its fine-tunings go before another seed's pre-training."""
    steps = _chains(tmp_path, [("uvla", 0), ("uvla", 1)])
    lines = []
    assert run_steps(steps, run=_finish, log=lines.append) == len(steps)
    assert _started(lines) == ["uvla0-pretrain", "uvla0-vqa2", "uvla0-nlvr2",
                               "uvla1-pretrain", "uvla1-vqa2", "uvla1-nlvr2"]


def test_runner_evaluates_a_finished_fine_tuning_before_the_next_one(tmp_path):
    """The RefCOCO+ splits come last in the plan but run as soon as their fine-tuning ends:
    a session that stops mid-study keeps the cells, and the checkpoint they read goes."""
    def step(name: str, task: str, seed: int = 0, **kwargs) -> Step:
        return replace(_step(tmp_path, name, ("tool", str(tmp_path / name))), system="base",
                       seed=seed, task=task, **kwargs)

    refcoco = step("refcoco", "refcoco_plus")
    later = [step(name, name) for name in ("vqa2", "nlvr2")]
    splits = step("splits", "refcoco_plus_splits", kind="evaluate",
                  needs=tmp_path / "refcoco" / "current.ckpt")
    # The next seed's RefCOCO+ has a step waiting on it (its splits), the splits none: they
    # still go first.
    refcoco_1 = step("refcoco_1", "refcoco_plus", seed=1)
    splits_1 = step("splits_1", "refcoco_plus_splits", seed=1, kind="evaluate",
                    needs=tmp_path / "refcoco_1" / "current.ckpt")
    lines = []
    assert run_steps([refcoco, *later, splits, refcoco_1, splits_1], run=_finish,
                     log=lines.append) == 6
    assert _started(lines) == ["refcoco", "splits", "refcoco_1", "splits_1", "vqa2", "nlvr2"]


def _complete(steps) -> callable:
    """A fake ``mmf_run`` / tool: each step's proof, and a ``train.log`` in each run folder."""
    by_command = {step.command: step for step in steps}

    def run(command) -> int:
        step = by_command[tuple(command)]
        if step.proof_file is not None:
            step.proof_file.parent.mkdir(parents=True, exist_ok=True)
            step.proof_file.write_text("made")
        keys = step.proof_keys or ("val/total_loss",)
        if step.kind != "corpus":
            _log(step.folder, "progress: 2/2, " + ", ".join(f"{key}: 0.5000" for key in keys))
        return 0
    return run


def _two_clones(tmp_path: Path, clone: str, **kwargs) -> tuple[Settings, list[Step]]:
    root = tmp_path / clone
    settings = Settings(World(root / "data" / "world"), root / "data" / "runs", seeds=(0,),
                        tasks=("vqa2", "nlvr2"), **kwargs)
    return settings, plan([SYSTEMS["base"], SYSTEMS["uvla"]], settings)


def test_an_archive_carries_a_study_to_another_clone(tmp_path):
    """Finished runs archived by one clone count as done in another clone in another folder
    whose runs folder is empty: nothing runs again, not even the pre-training whose weights
    are gone, until a run its weights feed is missing."""
    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    assert run_steps(steps, run=_complete(steps), log=lambda line: None,
                     on_done=archive.store) == len(steps)
    pretrain = next(step for step in steps if step.kind == "pretrain")
    copy = tmp_path / "archive" / "uvla" / "seed0" / "pretrain"
    assert sorted(p.name for p in copy.iterdir()) == ["step.json", "train.log"]
    command = json.loads((copy / "step.json").read_text())["command"]
    assert command[1:] == [arg.replace(str(settings.runs), "<runs>")
                           .replace(str(settings.world.path), "<world>")
                           for arg in pretrain.command[1:]]
    assert not any(str(tmp_path / "one") in arg for arg in command[1:])
    assert command[0] == f"<bin>/{Path(pretrain.command[0]).name}"  # the same in any clone
    assert (tmp_path / "archive" / "setup" / "corpus.json").exists()  # the corpus: its record

    other, steps = _two_clones(tmp_path, "two")
    archive = Archive(tmp_path / "archive", other)
    assert [archive.restore(step) for step in steps] == [True] * len(steps)
    assert not any(archive.restore(step) for step in steps)  # restored once
    assert read_record(steps[2])["command"] == list(steps[2].command)  # this clone's paths
    lines = []
    assert run_steps(steps, run=lambda command: pytest.fail(f"ran {command}"),
                     log=lines.append) == 0
    assert not (other.runs / "uvla" / "seed0" / "pretrain" / "uvla_final.pth").exists()
    assert sum("every step that reads its output is done" in line for line in lines) == 2

    # A fine-tuning of μ-VLA deleted from both: its corpus and pre-training run again first.
    vqa = next(s for s in steps if s.system == "uvla" and s.task == "vqa2")
    shutil.rmtree(vqa.folder)
    shutil.rmtree(tmp_path / "archive" / vqa.folder.relative_to(other.runs))
    ran = []
    run_steps(steps, run=lambda command: ran.append(command) or _complete(steps)(command),
              log=lambda line: None)
    assert [by.kind for c in ran for by in steps if by.command == tuple(c)] == \
        ["corpus", "pretrain", "finetune"]


def test_an_archived_run_of_other_settings_is_refused_and_bad_records_named(tmp_path):
    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    run_steps(steps, run=_complete(steps), log=lambda line: None, on_done=archive.store)
    other, steps = _two_clones(tmp_path, "two", finetune_updates=7)
    archive = Archive(tmp_path / "archive", other)
    for step in steps:
        archive.restore(step)
    with pytest.raises(StaleRun, match=r"training.max_updates=7"):
        run_steps(steps, run=_complete(steps), log=lambda line: None)
    record = tmp_path / "archive" / "base" / "seed0" / "vqa2" / "step.json"
    record.write_text("{")
    third, steps = _two_clones(tmp_path, "three")
    with pytest.raises(ValueError, match=re.escape(f"{record}:1: not valid json")):
        Archive(tmp_path / "archive", third).restore(
            next(s for s in steps if s.system == "base" and s.task == "vqa2"))


def test_a_run_that_does_not_say_its_world_is_refused_before_it_is_archived(tmp_path):
    """A runs folder left from before records kept their world (here an NLVR2 run of a
    preset world) is refused when a study starts, and never reaches the archive, where it
    would pass for a run of the world as it is now."""
    settings = Settings(World(tmp_path / "toy_world_tiny", "tiny"), tmp_path / "runs",
                        seeds=(0,), tasks=("nlvr2",))
    nlvr2 = next(s for s in plan([SYSTEMS["base"]], settings) if s.task == "nlvr2")
    _log(nlvr2.folder, "progress: 2/2, test/nlvr2/accuracy: 0.5000")
    nlvr2.record.write_text(json.dumps({"command": list(nlvr2.command)}))
    archive = Archive(tmp_path / "archive", settings)
    with pytest.raises(StaleRun, match="does not say which world"):
        run_steps([nlvr2], run=_finish, log=lambda line: None, on_done=archive.store)
    assert not archive.holds(nlvr2)


def test_make_replicate_keeps_the_calibrated_study_in_its_archive():
    def dry_run(*variables: str) -> str:
        result = subprocess.run(["make", "-n", "replicate", *variables],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split())

    assert "--archive results/archive/calibrated" in dry_run("RECIPE=calibrated", "TABLES=1")
    assert "--archive" not in dry_run("RECIPE=calibrated", "ARCHIVE=")
    assert "--archive" not in dry_run("TABLES=1")
    assert (REPO / "results" / "archive" / "calibrated").is_dir()


# ----------------------------------------------------------------------------- end to end

ARGS = ["--seeds", "2", "--systems", "base,random_pairs", "--tasks", "refcoco_plus",
        "--model-config", "configs/models/uvla/tiny_random.yaml", "--pretrain-updates", "2",
        "--finetune-updates", "2"]


def _mtimes(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_replicate_on_the_tiny_world_end_to_end(tiny_world, tmp_path, monkeypatch, capsys):
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = ["--world", str(tiny_world), "--runs", str(runs), "--out", str(out), *ARGS]
    result = subprocess.run([sys.executable, str(REPO / "tools" / "replicate.py"), *args],
                            capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert re.search(r"\[10/10\] RefCOCO\+ val/testA/testB of Random pairs, seed 1 \| "
                     r"elapsed \d:\d\d:\d\d \| ETA \d:\d\d:\d\d", result.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["runs.json", "table1.md", "table1.png"]
    assert (out / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # runs.json: every run with its metrics, wall time and command.
    runs_json = json.loads((out / "runs.json").read_text())
    entries = runs_json["runs"]
    assert len(entries) == 10 and all(e["finished"] and e["wall_s"] > 0 for e in entries)
    assert runs_json["settings"]["seeds"] == [0, 1]
    # The table's cells: mean ± sample std of the two seeds' logged values.
    table = (out / "table1.md").read_text()
    assert table in result.stdout
    stds = []
    for label, system in (("Base", "base"), ("Random pairs", "random_pairs")):
        row = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
        for column, split in ((4, "val"), (5, "testA"), (6, "testB")):
            values = [e["metrics"][f"test/refcoco_plus_{split}/refcoco_accuracy"] for e in entries
                      if e["system"] == system and e["task"] == "refcoco_plus_splits"]
            assert len(values) == 2
            mean, std = 100 * statistics.fmean(values), 100 * statistics.stdev(values)
            stds.append(std)
            assert row.split(" | ")[column] == f"{mean:.1f} ± {std:.1f}", row
        assert row.endswith(" | 2 |")
    assert max(stds) > 0  # the seeds differ: each run got its own training.seed
    assert "| *Trivial (majority / chance)* |" in table
    # Only the fine-tuning logs are left of the fine-tuning runs; the pre-training keeps its model.
    assert not list(runs.rglob("*.ckpt"))
    assert [p.parent.name for p in runs.rglob("uvla_final.pth")] == ["pretrain"] * 2

    # Resume with everything done: no command runs, no file under runs changes.
    before = _mtimes(runs)
    real_popen = children.subprocess.Popen
    launched = []

    def spy(command, *a, **k):
        if command[0] != "git":  # the study's commands, not the commit a record names
            launched.append(list(command))
        return real_popen(command, *a, **k)

    monkeypatch.setattr(children.subprocess, "Popen", spy)
    tool = _tool()
    assert tool.main(args) == 0
    assert launched == []
    assert _mtimes(runs) == before

    # Finished runs removed (a fine-tuning and the inference reading its checkpoint): exactly
    # these run again, nothing else is touched.
    redo = [runs / "base" / "seed1" / name for name in ("refcoco_plus", "refcoco_plus_splits")]
    for folder in redo:
        shutil.rmtree(folder)
    assert tool.main(args) == 0
    saves = [next(a for a in command if a.startswith("env.save_dir=")) for command in launched]
    assert saves == [f"env.save_dir={folder}" for folder in redo]
    after = _mtimes(runs)
    kept = {p: t for p, t in before.items() if not any(f in p.parents for f in redo)}
    assert {p: t for p, t in after.items() if p in kept} == kept
    assert all((folder / "step.json").exists() for folder in redo)
    table = (out / "table1.md").read_text()  # its wall time now sums the two new runs

    # Archived (by --plan, which runs nothing), then the runs folder lost (a new session):
    # the same table, nothing runs.
    archived = args + ["--archive", str(tmp_path / "archive")]
    launched.clear()
    assert tool.main(archived + ["--plan"]) == 0
    assert len(list((tmp_path / "archive").rglob("step.json"))) == 10
    shutil.rmtree(runs)
    assert tool.main(archived) == 0
    assert launched == []
    assert (out / "table1.md").read_text() == table
    assert not list(runs.rglob("*.pth"))  # the pre-trainings were not run again

    # --recorded: a run that is neither in the runs folder nor archived is listed, not run;
    # the table shows the runs there are.
    lost = Path("random_pairs") / "seed1" / "refcoco_plus_splits"
    shutil.rmtree(runs / lost)
    shutil.rmtree(tmp_path / "archive" / lost)
    capsys.readouterr()
    assert tool.main(archived + ["--recorded"]) == 0
    printed = capsys.readouterr().out
    assert launched == []
    assert ("--recorded: 1 of 10 steps have no finished run and were not run\n"
            "    RefCOCO+ val/testA/testB of Random pairs, seed 1\n") in printed
    recorded = (out / "table1.md").read_text()
    assert "this call trained nothing" in recorded
    assert next(line for line in recorded.splitlines()
                if line.startswith("| Random pairs |")).endswith(" | 1 |")


SEED_ROWS = {"Base": "base", "VisualBERT": "visual_bert", "ViLBERT": "vilbert",
             "VL-BERT": "vl_bert"}


@pytest.mark.slow
def test_replicate_with_the_reference_models_on_the_tiny_world_end_to_end(tiny_world, tmp_path):
    """Table 1's reference-model rows run by the same harness as Base: 1 seed, RefCOCO+ only,
    2 updates, each model's tiny random version (about 2 minutes); each fine-tuning is
    evaluated twice and its best checkpoint tested."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = ["--world", str(tiny_world), "--runs", str(runs), "--out", str(out), "--seeds", "1",
            "--systems", ",".join(SEED_ROWS.values()), "--tasks", "refcoco_plus",
            "--pretrain-updates", "2", "--finetune-updates", "2", "--finetune-evaluations", "2",
            *(option for path in TINY_MODELS for option in ("--model-config", path))]
    result = subprocess.run([sys.executable, str(REPO / "tools" / "replicate.py"), *args],
                            capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    entries = json.loads((out / "runs.json").read_text())["runs"]
    assert len(entries) == 1 * 2 + 3 * 3 and all(e["finished"] for e in entries)
    assert {e["system"] for e in entries if e["kind"] == "pretrain"} == set(REFERENCE_MODELS)
    table = (out / "table1.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]  # no header
    assert [row.split(" | ")[0][2:] for row in rows] == [*SEED_ROWS,
                                                        "*Trivial (majority / chance)*"]
    for row, system in zip(rows, SEED_ROWS.values()):
        split_run = next(e for e in entries
                         if e["system"] == system and e["task"] == "refcoco_plus_splits")
        for column, split in ((4, "val"), (5, "testA"), (6, "testB")):
            value = split_run["metrics"][f"test/refcoco_plus_{split}/refcoco_accuracy"]
            assert row.split(" | ")[column] == f"{100 * value:.1f}", row
        assert row.endswith(" | 1 |")
        finetune = next(e for e in entries if e["system"] == system and e["task"] == "refcoco_plus")
        log = (runs / system / "seed0" / "refcoco_plus" / "train.log").read_text()
        assert "training.evaluation_interval=1" in finetune["command"]
        assert log.count("val/refcoco_plus/refcoco_accuracy") >= 2  # updates 1 and 2
        assert any(a.endswith("refcoco_plus/best.ckpt") for a in split_run["command"])
    # Each pre-training kept only the weights its model's fine-tuning loaded.
    assert not list(runs.rglob("*.ckpt"))
    assert sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*.pth")) == sorted(
        f"{key}/seed0/pretrain/{REFERENCE_SYSTEMS[key].final_weights}" for key in REFERENCE_MODELS)
