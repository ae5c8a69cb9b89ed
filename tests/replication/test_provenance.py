"""What made a run: the fields of its step.json (commit, device, precision, torch, threads),
and a table whose runs were made differently saying which cells come from which."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from mmf_uvlp.replication import provenance, runner
from mmf_uvlp.replication.aggregate import seed_cells, table_rows
from mmf_uvlp.replication.provenance import (
    MIXED,
    NO_DEVICE,
    REMADE,
    MadeBy,
    cpu_model,
    precision,
    run_made,
    table_provenance,
)
from mmf_uvlp.replication.render import markdown
from mmf_uvlp.replication.runner import read_record, run_steps
from mmf_uvlp.replication.steps import Settings, Step, plan
from mmf_uvlp.replication.study import SYSTEMS, TABLES
from mmf_uvlp.replication.world import World

from helpers import REPO


PREFIX = "2026-01-01T00:00:00 | INFO | mmf.train : "


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout


def _step(tmp_path: Path, name: str, *options: str) -> Step:
    folder = tmp_path / name
    return Step(
        "finetune",
        name,
        ("tool", *options, str(folder)),
        folder,
        folder / "step.json",
        proof_file=folder / "done",
    )


def _finish(command) -> int:
    folder = Path(command[-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "done").write_text("ok")
    return 0


def test_a_run_s_record_says_what_made_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    plain, half = _step(tmp_path, "plain"), _step(tmp_path, "half", "training.fp16=True")
    assert run_steps([plain, half], run=_finish, log=lambda line: None) == 2
    record = json.loads(plain.record.read_text())
    assert (
        record["commit"] == _git("log", "-1", "--format=%H", "--", ".", ":(exclude)results").strip()
    )
    changed = _git("status", "--porcelain", "--untracked-files=no").strip()
    outside = [line for line in changed.splitlines() if not line[3:].startswith("results/")]
    assert record["tree_clean"] is (not outside)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    assert record["device"] == (gpu or cpu_model()) and record["device"] != "unknown"
    assert record["precision"] == "fp32" and record["torch"] == torch.__version__
    assert record["threads"] == 3
    assert json.loads(half.record.read_text())["precision"] == "fp16"
    assert MadeBy.of(record).describe().startswith(f"commit {record['commit'][:10]} (")


def test_the_tree_is_clean_unless_a_tracked_file_outside_results_changed(tmp_path, monkeypatch):
    """The commit named is the newest that changed a file outside results/: a study that
    commits its archive as it goes keeps naming the code its runs ran."""
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "results" / "step.json").write_text("{}\n")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    monkeypatch.setattr(provenance, "REPO", repo)
    head = git("rev-parse", "HEAD").strip()
    assert provenance.commit() == (head, True)
    (repo / "results" / "step.json").write_text('{"wall_s": 1}\n')  # a study archiving
    (repo / "new.py").write_text("")  # untracked
    assert provenance.commit() == (head, True)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "archived")
    assert git("rev-parse", "HEAD").strip() != head
    assert provenance.commit() == (head, True)  # a commit of results/ alone: the same code
    (repo / "code.py").write_text("x = 2\n")
    assert provenance.commit() == (head, False)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "code")
    assert provenance.commit() == (git("rev-parse", "HEAD").strip(), True)
    monkeypatch.setattr(provenance, "REPO", tmp_path / "elsewhere")  # no checkout
    assert provenance.commit() == (None, None)


def test_what_made_a_run_is_taken_when_it_starts(tmp_path, monkeypatch):
    """A run that outlasts a commit (the repository checked out anew while it trains) is
    recorded with the commit it started from."""
    monkeypatch.setattr(runner, "made_by", lambda command: {"commit": "before"})

    def run(command) -> int:
        monkeypatch.setattr(runner, "made_by", lambda command: {"commit": "after"})
        return _finish(command)

    step = _step(tmp_path, "a")
    run_steps([step], run=run, log=lambda line: None)
    assert read_record(step)["commit"] == "before"


def test_precision_from_the_command_line_and_the_config(tmp_path):
    assert precision(("mmf_run", "config=projects/uvla/pretrain.yaml")) == "fp32"
    assert precision(("mmf_run", "training.fp16=True")) == "fp16"
    assert precision(("mmf_run", "training.fp16=True", "training.fp16=False")) == "fp32"
    (tmp_path / "base.yaml").write_text("training:\n  fp16: true\n  batch_size: 4\n")
    (tmp_path / "child.yaml").write_text("includes: [base.yaml]\ntraining: {batch_size: 8}\n")
    (tmp_path / "broken.yaml").write_text("includes: [base.yaml, missing.yaml]\n")
    (tmp_path / "off.yaml").write_text("includes: [base.yaml]\ntraining: {fp16: false}\n")
    child, off = f"config={tmp_path / 'child.yaml'}", f"config={tmp_path / 'off.yaml'}"
    assert precision(("mmf_run", child)) == "fp16"  # from its include
    assert precision(("mmf_run", off)) == "fp32"  # its own value wins over the include's
    assert precision(("mmf_run", off, "training.fp16=True")) == "fp16"  # the command's wins
    with pytest.raises(FileNotFoundError, match="missing.yaml"):  # as mmf_run would stop
        precision(("mmf_run", f"config={tmp_path / 'broken.yaml'}"))


def test_bfloat16_autocast_is_recorded_as_bf16(tmp_path):
    assert precision(("mmf_run", "training.fp16=True", "training.amp_dtype=bfloat16")) == "bf16"
    assert precision(("mmf_run", "training.amp_dtype=bfloat16")) == "fp32"  # autocast off
    (tmp_path / "bf16.yaml").write_text("training: {fp16: true, amp_dtype: bfloat16}\n")
    assert precision(("mmf_run", f"config={tmp_path / 'bf16.yaml'}")) == "bf16"
    assert (
        precision(("mmf_run", f"config={tmp_path / 'bf16.yaml'}", "training.amp_dtype=float16"))
        == "fp16"
    )


def test_a_record_written_before_records_kept_them_reads_unknown():
    old = MadeBy.of({"title": "x", "command": ["mmf_run"], "wall_s": 1.0, "threads": 1})
    assert old == MadeBy(threads=1)
    assert (old.commit, old.device, old.precision, old.torch) == ("unknown",) * 4
    assert old.describe() == (
        "commit, device, precision and torch not recorded (runs recorded "
        "before step.json kept them), 1 thread"
    )
    new = MadeBy.of(
        {
            "commit": "0123456789abcdef",
            "tree_clean": False,
            "device": "NVIDIA H200",
            "precision": "fp16",
            "torch": "2.13.0",
            "threads": 16,
        }
    )
    assert new.describe() == (
        "commit 0123456789 (uncommitted changes), NVIDIA H200, fp16, torch 2.13.0, 16 threads"
    )


# ----------------------------------------------------------------------------- tables

CELLS = {
    0: {
        "vqa2": 0.50,
        "nlvr2": 0.60,
        "visual_entailment": 0.70,
        "val": 0.40,
        "testA": 0.50,
        "testB": 0.60,
    },
    1: {
        "vqa2": 0.54,
        "nlvr2": 0.64,
        "visual_entailment": 0.66,
        "val": 0.46,
        "testA": 0.50,
        "testB": 0.54,
    },
}
MADE = {
    "commit": "a" * 40,
    "tree_clean": True,
    "device": "CPU X",
    "precision": "fp32",
    "torch": "2.13.0",
    "threads": 1,
}


def _runs(settings: Settings, made: dict) -> list[Step]:
    """Table 4's runs (w/o w_ITM, w_ITM; seeds 0, 1), each with its log and a step.json
    saying it was made by ``made[(system, seed, task)]``, else by :data:`MADE`."""
    steps = plan([SYSTEMS["no_witm"], SYSTEMS["uvla"]], settings)
    for step in steps:
        if step.system is None:
            continue
        values = CELLS[step.seed]
        step.folder.mkdir(parents=True, exist_ok=True)
        if step.kind == "finetune":
            metric = (
                "vqa_accuracy"
                if step.task == "vqa2"
                else ("refcoco_accuracy" if step.task == "refcoco_plus" else "accuracy")
            )
            value = values.get(step.task, 0.9999)
            line = f"progress: 4/4, test/{step.task}/{metric}: {value:.4f}"
        elif step.kind == "evaluate":
            line = "progress: 4/4, " + ", ".join(
                f"test/refcoco_plus_{split}/refcoco_accuracy: {values[split]:.4f}"
                for split in ("val", "testA", "testB")
            )
        else:
            line = "progress: 4/4, val/total_loss: 1.0"
            (step.folder / "uvla_final.pth").write_bytes(b"weights")
        (step.folder / "train.log").write_text(PREFIX + line + "\n")
        record = {
            "title": step.title,
            "command": list(step.command),
            **made.get((step.system, step.seed, step.task), MADE),
        }
        step.record.write_text(json.dumps(record))
    return steps


def _table(tmp_path: Path, made: dict) -> str:
    settings = Settings(World(tmp_path / "world"), tmp_path / "runs", seeds=(0, 1))
    steps = _runs(settings, made)
    cells = seed_cells(steps)
    rows = TABLES["4"].rows
    provenance = table_provenance(rows, (0, 1), steps, {s: read_record(s) for s in steps}, cells)
    return markdown(
        TABLES["4"], table_rows(rows, (0, 1), cells), (0, 1), {}, "World x.", None, provenance
    )


def test_a_table_of_runs_made_alike_says_what_made_them(tmp_path):
    text = _table(tmp_path, {})
    assert (
        "Made by: commit aaaaaaaaaa (clean), CPU X, fp32, torch 2.13.0, 1 thread."
        in text.splitlines()
    )
    assert MIXED not in text


@pytest.mark.parametrize(
    "field, value",
    [
        ("commit", "b" * 40),
        ("device", "NVIDIA H200"),
        ("precision", "fp16"),
        ("tree_clean", False),
        ("threads", 2),
    ],
)
def test_a_table_of_runs_made_differently_marks_the_cells_and_lists_them(tmp_path, field, value):
    """w_ITM's seed-1 VQA fine-tuning made by another commit, device, precision, tree or
    thread count: its VQA cell and Meta-Ave are marked, nothing else; the footnote lists
    which runs each kind made."""
    other = {**MADE, field: value}
    lines = _table(tmp_path, {("uvla", 1, "vqa2"): other}).splitlines()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines if line.startswith("| w")}
    assert rows["w_ITM"][1:6] == [
        "52.0 ± 2.8 †",
        "62.0 ± 2.8",
        "68.0 ± 2.8",
        "43.0 ± 4.2",
        "58.0 ± 0.7 †",
    ]
    assert MIXED not in " ".join(rows["w/o w_ITM"])
    start = lines.index(next(line for line in lines if line.startswith("Runs made in 2 ")))
    assert f"a cell marked {MIXED} averages runs of more than one" in lines[start]
    groups = {
        MadeBy.of(MADE).describe(): "w/o w_ITM seeds 0, 1; w_ITM seeds 0, 1 "
        "(pre-training, nlvr2, visual_entailment, "
        "refcoco_plus, RefCOCO+ splits)",
        MadeBy.of(other).describe(): "w_ITM seed 1 (vqa2)",
    }
    assert sorted(lines[start + 1 : start + 3]) == sorted(
        f"- {kind}: {units}" for kind, units in groups.items()
    )


def test_a_run_resumed_on_another_commit_counts_as_made_both_ways(tmp_path):
    """w_ITM's seed-1 VQA run, stopped and resumed: started by another commit, its cells are
    marked and the footnote names it under both; resumed by the same one, nothing is."""
    other = {**MADE, "commit": "b" * 40, "wall_s": 60.0}
    resumed = {**MADE, "interrupted": [other]}
    lines = _table(tmp_path, {("uvla", 1, "vqa2"): resumed}).splitlines()
    row = next(line for line in lines if line.startswith("| w_ITM ")).split(" | ")
    assert row[1].endswith(MIXED) and row[5].endswith(MIXED) and MIXED not in row[2]
    assert f"- {MadeBy.of(other).describe()}: w_ITM seed 1 (vqa2)" in lines
    assert f"- {MadeBy.of(MADE).describe()}: w/o w_ITM seeds 0, 1; w_ITM seeds 0, 1" in lines
    assert run_made(resumed) == (MadeBy.of(other), MadeBy.of(MADE))
    alike = _table(
        tmp_path / "alike",
        {("uvla", 1, "vqa2"): {**MADE, "interrupted": [{**MADE, "wall_s": 60.0}]}},
    )
    assert MIXED not in alike and "Made by: commit aaaaaaaaaa (clean)" in alike


RUNS = ("pretrain", "vqa2", "nlvr2", "visual_entailment", "refcoco_plus", "refcoco_plus_splits")


def test_runs_whose_records_do_not_say_are_set_apart_from_those_that_do(tmp_path):
    """Records written before they kept what made the run cannot be taken as made alike
    with recorded ones: the table says which cells are which."""
    old = {"threads": 1}
    lines = _table(
        tmp_path, {("uvla", seed, task): old for seed in (0, 1) for task in RUNS}
    ).splitlines()
    assert (
        "- commit, device, precision and torch not recorded (runs recorded before "
        "step.json kept them), 1 thread: w_ITM seeds 0, 1"
    ) in lines
    assert f"- {MadeBy.of(MADE).describe()}: w/o w_ITM seeds 0, 1" in lines
    assert MIXED not in "".join(line for line in lines if line.startswith("| "))
    every_old = _table(
        tmp_path / "old",
        {
            (system, seed, task): old
            for system in ("uvla", "no_witm")
            for seed in (0, 1)
            for task in RUNS
        },
    )
    assert (
        "Made by: commit, device, precision and torch not recorded (runs recorded before "
        "step.json kept them), 1 thread."
    ) in every_old.splitlines()


def test_cells_whose_runs_name_no_device_are_marked(tmp_path):
    """w_ITM's seed-1 VQA fine-tuning's record names no device (a record given after the
    fact what its log establishes, its device "unknown"): its VQA cell and Meta-Ave carry
    the mark, the footnote says what it means, and the row of named devices carries none."""
    backfilled = {**MADE, "commit": "unknown", "device": "unknown", "tree_clean": None}
    lines = _table(tmp_path, {("uvla", 1, "vqa2"): backfilled}).splitlines()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines if line.startswith("| w")}
    assert rows["w_ITM"][1:6] == [
        f"52.0 ± 2.8 {MIXED}{NO_DEVICE}",
        "62.0 ± 2.8",
        "68.0 ± 2.8",
        "43.0 ± 4.2",
        f"58.0 ± 0.7 {MIXED}{NO_DEVICE}",
    ]
    assert NO_DEVICE not in " ".join(rows["w/o w_ITM"])
    assert any(line.startswith(f"A cell marked {NO_DEVICE} comes from runs") for line in lines)
    assert (
        "- commit unknown, device unknown, fp32, torch 2.13.0, 1 thread: w_ITM seed 1 (vqa2)"
    ) in lines
    every = _table(
        tmp_path / "all",
        {
            (system, seed, task): backfilled
            for system in ("uvla", "no_witm")
            for seed in (0, 1)
            for task in RUNS
        },
    ).splitlines()
    assert "Made by: commit unknown, device unknown, fp32, torch 2.13.0, 1 thread." in every
    assert (
        next(line for line in every if line.startswith("| w_ITM ")).split(" | ")[1]
        == f"52.0 ± 2.8 {NO_DEVICE}"
    )
    assert NO_DEVICE not in _table(tmp_path / "named", {})


def test_a_seed_whose_fine_tunings_read_different_pre_trained_weights_is_marked(tmp_path):
    """w_ITM seed 1's VQA fine-tuning read other pre-trained weights than its other
    fine-tunings (its pre-training made again in another runs folder): that seed's cells of
    the row and its Meta-Ave are marked, the footnote names which fine-tunings read which
    weights; the same weights everywhere mark nothing."""
    first, again = {**MADE, "pretrained_sha256": "a" * 64}, {**MADE, "pretrained_sha256": "b" * 64}
    made = {("uvla", 1, task): first for task in RUNS[1:5]}
    assert REMADE not in _table(tmp_path / "same", made)
    lines = _table(tmp_path / "remade", {**made, ("uvla", 1, "vqa2"): again}).splitlines()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines if line.startswith("| w")}
    assert rows["w_ITM"][1:6] == [
        "52.0 ± 2.8 ‡",
        "62.0 ± 2.8 ‡",
        "68.0 ± 2.8 ‡",
        "43.0 ± 4.2 ‡",
        "58.0 ± 0.7 ‡",
    ]
    assert REMADE not in " ".join(rows["w/o w_ITM"]) and MIXED not in " ".join(rows["w_ITM"])
    assert (
        f"- w_ITM seed 1: its fine-tunings read 2 different pre-trained weights (SHA-256 "
        f"{'b' * 12}: vqa2; SHA-256 {'a' * 12}: nlvr2, visual_entailment, refcoco_plus)"
    ) in lines
    assert any(
        line.startswith(
            f"A cell marked {REMADE} comes from a seed whose pre-training was made again"
        )
        for line in lines
    )
