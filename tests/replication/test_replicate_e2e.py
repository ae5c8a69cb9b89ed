"""`uvlp-replicate` end to end on the tiny world (2 seeds, 2 systems; 1 seed, Base and the
three reference models)."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from mmf_uvlp.replication import children
from mmf_uvlp.reference_models import REFERENCE_MODELS
from mmf_uvlp.reference_models import SYSTEMS as REFERENCE_SYSTEMS

from helpers import REPO
from helpers.replication import TINY_MODELS, replicate_tool, wall_line, wall_line_of


# ----------------------------------------------------------------------------- end to end

ARGS = [
    "--seeds",
    "2",
    "--systems",
    "base,random_pairs",
    "--tasks",
    "refcoco_plus",
    "--model-config",
    "configs/models/uvla/tiny_random.yaml",
    "--pretrain-updates",
    "2",
    "--finetune-updates",
    "2",
]


def _mtimes(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_replicate_on_the_tiny_world_end_to_end(tiny_world, tmp_path, monkeypatch, capsys):
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = ["--world", str(tiny_world), "--runs", str(runs), "--out", str(out), *ARGS]
    result = subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.cli.replicate", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert re.search(
        r"\[10/10\] RefCOCO\+ val/testA/testB of Random pairs, seed 1 \| "
        r"elapsed \d:\d\d:\d\d \| ETA \d:\d\d:\d\d",
        result.stdout,
    )
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
            values = [
                e["metrics"][f"test/refcoco_plus_{split}/refcoco_accuracy"]
                for e in entries
                if e["system"] == system and e["task"] == "refcoco_plus_splits"
            ]
            assert len(values) == 2
            mean, std = 100 * statistics.fmean(values), 100 * statistics.stdev(values)
            stds.append(std)
            assert row.split(" | ")[column] == f"{mean:.1f} ± {std:.1f}", row
        assert row.endswith(" | 2 |")
    assert max(stds) > 0  # the seeds differ: each run got its own training.seed
    assert "| *Trivial (majority / chance)* |" in table
    assert wall_line(table) == wall_line_of(entries)
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
    tool = replicate_tool()
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
    new_entries = json.loads((out / "runs.json").read_text())["runs"]
    assert wall_line(table) == wall_line_of(new_entries)

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
    assert (
        "--recorded: 1 of 10 steps have no finished run and were not run\n"
        "    RefCOCO+ val/testA/testB of Random pairs, seed 1\n"
    ) in printed
    recorded = (out / "table1.md").read_text()
    assert "this call trained nothing" in recorded
    assert next(
        line for line in recorded.splitlines() if line.startswith("| Random pairs |")
    ).endswith(" | 1 |")


SEED_ROWS = {
    "Base": "base",
    "VisualBERT": "visual_bert",
    "ViLBERT": "vilbert",
    "VL-BERT": "vl_bert",
}


@pytest.mark.slow
def test_replicate_with_the_reference_models_on_the_tiny_world_end_to_end(tiny_world, tmp_path):
    """Table 1's reference-model rows run by the same harness as Base: 1 seed, RefCOCO+ only,
    2 updates, each model's tiny random version (about 2 minutes); each fine-tuning is
    evaluated twice and its best checkpoint tested."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = [
        "--world",
        str(tiny_world),
        "--runs",
        str(runs),
        "--out",
        str(out),
        "--seeds",
        "1",
        "--systems",
        ",".join(SEED_ROWS.values()),
        "--tasks",
        "refcoco_plus",
        "--pretrain-updates",
        "2",
        "--finetune-updates",
        "2",
        "--finetune-evaluations",
        "2",
        *(option for path in TINY_MODELS for option in ("--model-config", path)),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.cli.replicate", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    entries = json.loads((out / "runs.json").read_text())["runs"]
    assert len(entries) == 1 * 2 + 3 * 3 and all(e["finished"] for e in entries)
    assert {e["system"] for e in entries if e["kind"] == "pretrain"} == set(REFERENCE_MODELS)
    table = (out / "table1.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]  # no header
    assert [row.split(" | ")[0][2:] for row in rows] == [
        *SEED_ROWS,
        "*Trivial (majority / chance)*",
    ]
    for row, system in zip(rows, SEED_ROWS.values()):
        split_run = next(
            e for e in entries if e["system"] == system and e["task"] == "refcoco_plus_splits"
        )
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
        f"{key}/seed0/pretrain/{REFERENCE_SYSTEMS[key].final_weights}" for key in REFERENCE_MODELS
    )
