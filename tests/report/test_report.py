"""uvlp-report and mmf_uvlp.report on fabricated MMF logs and results.json files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mmf_uvlp.report import Table, collect_run, meta_average, parse_log
from mmf_uvlp.cli import report

from helpers import REPO, trivial_by_hand

PREFIX = "2026-01-01T00:00:00 | INFO | mmf.train : "


def _tool():
    return report


def _results(folder: Path, task: str, metrics: dict, system: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"task": task, "metrics": metrics}
    if system:
        entry["system"] = system
    (folder / "results.json").write_text(json.dumps(entry))


def _log(folder: Path, *lines: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("".join(PREFIX + line + "\n" for line in lines))


@pytest.fixture
def runs(tmp_path) -> dict:
    base = tmp_path / "base"
    _results(base / "vqa2", "vqa2", {"test": 0.701}, system="Base")
    _results(base / "nlvr2", "nlvr2", {"test": 0.512, "val": 0.5})
    # VE and RefCOCO+ from MMF logs (simple format), RefCOCO+ val from an evaluation view
    # over the val/ fallback of the training run.
    _log(
        base / "ve",
        "progress: 10/10, test/total_loss: 0.5000, test/visual_entailment/accuracy: 0.7320",
    )
    _log(
        base / "refcoco_train",
        "progress: 2/4, val/total_loss: 9.0000, val/refcoco_plus/refcoco_accuracy: 0.1000",
        "progress: 4/4, val/total_loss: 8.0000, val/refcoco_plus/refcoco_accuracy: 0.2000",
    )
    _log(
        base / "refcoco_test",
        "Starting inference on test set",
        "progress: 4/4, test/total_loss: 7.4965, test/refcoco_plus_val/refcoco_accuracy: 0.6940, "
        "test/refcoco_plus_testA/refcoco_accuracy: 0.7480, "
        "test/refcoco_plus_testB/refcoco_accuracy: 0.6030",
    )
    uvla = tmp_path / "uvla"
    # json log format; NLVR2 and RefCOCO+ testB missing.
    _log(uvla / "vqa2", json.dumps({"progress": "8/8", "test/vqa2/vqa_accuracy": "0.7210"}))
    _results(uvla / "ve", "visual_entailment", {"test": 0.773})
    _results(uvla / "refcoco", "refcoco_plus", {"val": 0.803, "testA": 0.855})
    return {"base": base, "uvla": uvla}


def test_parse_log_keeps_the_last_value_of_each_key(tmp_path):
    _log(
        tmp_path,
        "progress: 2/4, val/vqa2/vqa_accuracy: 0.1000, num_updates: 2",
        "no metrics here: 0.9",
        "progress: 4/4, val/vqa2/vqa_accuracy: 0.2500, lr: 0.0001",
        json.dumps(
            {"progress": "4/4", "test/nlvr2/accuracy": "0.6000", "best_val/total_loss": "1"}
        ),
    )
    assert parse_log(tmp_path / "train.log") == {
        "val/vqa2/vqa_accuracy": 0.25,
        "test/nlvr2/accuracy": 0.6,
    }


def test_collect_run_prefers_views_and_results_files(runs):
    base = collect_run(runs["base"])
    assert base.systems == ["Base"]
    assert base.cells == {
        ("vqa2", "test"): 0.701,
        ("nlvr2", "test"): 0.512,
        ("nlvr2", "val"): 0.5,
        ("visual_entailment", "test"): 0.732,
        ("refcoco_plus", "val"): 0.694,
        ("refcoco_plus", "testA"): 0.748,
        ("refcoco_plus", "testB"): 0.603,
    }
    assert base.sources[("refcoco_plus", "val")].endswith(
        "train.log: test/refcoco_plus_val/refcoco_accuracy"
    )
    # Only the training run's validation: the fallback, last value.
    (runs["base"] / "refcoco_test" / "train.log").unlink()
    assert collect_run(runs["base"]).cells[("refcoco_plus", "val")] == 0.2


def test_meta_average_arithmetic_and_notes():
    full = {
        ("vqa2", "test"): 0.70,
        ("nlvr2", "test"): 0.50,
        ("visual_entailment", "test"): 0.80,
        ("refcoco_plus", "val"): 0.60,
        ("refcoco_plus", "testA"): 0.90,
        ("refcoco_plus", "testB"): 0.30,
    }
    meta = meta_average(full)
    assert meta.value == pytest.approx((0.70 + 0.50 + 0.80 + 0.60) / 4) and meta.note is None
    partial = {
        k: v for k, v in full.items() if k not in {("nlvr2", "test"), ("refcoco_plus", "testB")}
    }
    meta = meta_average(partial)
    assert meta.value == pytest.approx((0.70 + 0.80 + 0.75) / 3)
    assert meta.note == "mean of VQA, VE, RefCOCO+ (val, testA only); missing: NLVR2"
    assert meta_average({}).value is None


def test_table_markdown_and_chart(runs, tmp_path, capsys, saved_figures):
    code = _tool().main(
        [
            "--run",
            f"Base={runs['base']}",
            "--run",
            f"μ-VLA={runs['uvla']}",
            "--out",
            str(tmp_path / "report"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    markdown = (tmp_path / "report" / "table.md").read_text(encoding="utf-8")
    assert markdown in printed
    lines = markdown.splitlines()
    assert lines[0] == "| System | VQA | NLVR2 | VE | RefCOCO+ val | testA | testB | Meta-Ave |"
    base_meta = (0.701 + 0.512 + 0.732 + (0.694 + 0.748 + 0.603) / 3) / 4
    assert lines[2] == f"| Base | 70.1 | 51.2 | 73.2 | 69.4 | 74.8 | 60.3 | {100 * base_meta:.1f} |"
    uvla_meta = (0.721 + 0.773 + (0.803 + 0.855) / 2) / 3
    assert lines[3] == f"| μ-VLA | 72.1 | — | 77.3 | 80.3 | 85.5 | — | {100 * uvla_meta:.1f}* |"
    assert (
        "- μ-VLA: Meta-Ave* is the mean of VQA, VE, RefCOCO+ (val, testA only); missing: NLVR2."
    ) in lines
    assert not any(line.startswith("- Base") for line in lines)
    png = (tmp_path / "report" / "table.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # The chart: one bar per cell at its value, Base left of μ-VLA in each column group,
    # a dash where a cell is missing, μ-VLA's Meta-Ave over fewer tasks hatched.
    (drawn,) = saved_figures
    (ax,) = drawn.axes
    bars = [
        (round(p.get_x() + p.get_width() / 2, 3), round(p.get_height(), 3), p.get_hatch())
        for p in ax.patches
    ]
    assert bars == [
        (-0.2, 70.1, None),
        (0.8, 51.2, None),
        (1.8, 73.2, None),
        (2.8, 69.4, None),
        (3.8, 74.8, None),
        (4.8, 60.3, None),
        (5.8, round(100 * base_meta, 3), None),
        (0.2, 72.1, None),
        (2.2, 77.3, None),
        (3.2, 80.3, None),
        (4.2, 85.5, None),
        (6.2, round(100 * uvla_meta, 3), "//"),
    ]
    assert sorted((round(t.get_position()[0], 3), t.get_text()) for t in ax.texts) == [
        (1.2, "—"),
        (5.2, "—"),
    ]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "VQA",
        "NLVR2",
        "VE",
        "RefCOCO+ val",
        "testA",
        "testB",
        "Meta-Ave",
    ]


def test_trivial_row_of_a_world(runs, skewed_world, tmp_path, capsys):
    """The row holds the world's rates recomputed by hand, on a world where a rate fitted on
    the test split (or one RefCOCO+ split's chance for all three) would print another."""
    from mmf_uvlp.replication.outputs import refcoco_max_proposals

    rates = trivial_by_hand.by_hand(skewed_world, refcoco_max_proposals())
    out = tmp_path / "report"
    assert (
        _tool().main(
            ["--run", f"Base={runs['base']}", "--trivial", str(skewed_world), "--out", str(out)]
        )
        == 0
    )
    lines = (out / "table.md").read_text(encoding="utf-8").splitlines()
    meta = meta_average(rates).value
    cells = [
        ("vqa2", "test"),
        ("nlvr2", "test"),
        ("visual_entailment", "test"),
        ("refcoco_plus", "val"),
        ("refcoco_plus", "testA"),
        ("refcoco_plus", "testB"),
    ]
    assert lines[3] == (
        "| *Trivial (majority / chance)* | "
        + " | ".join(f"{100 * rates[c]:.1f}" for c in cells)
        + f" | {100 * meta:.1f} |"
    )
    assert any(line.startswith("Trivial, fitted on the train split") for line in lines)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _tool().main(
            [
                "--run",
                f"Base={runs['base']}",
                "--trivial",
                str(tmp_path / "none"),
                "--out",
                str(out),
            ]
        )
    error = capsys.readouterr().err
    assert "--trivial:" in error and "none is no folder" in error


def test_row_named_by_results_file_or_folder(runs, tmp_path):
    table = Table.from_runs([(None, runs["base"]), (None, runs["uvla"])])
    assert [row.system for row in table.rows] == ["Base", "uvla"]
    _results(runs["uvla"] / "other", "nlvr2", {"test": 0.7}, system="Other")
    _results(runs["uvla"] / "more", "vqa2", {"val": 0.7}, system="More")
    with pytest.raises(ValueError, match="several systems.*--run NAME=PATH"):
        Table.from_runs([(None, runs["uvla"])])
    with pytest.raises(ValueError, match=r"systems named twice: \['A'\]"):
        Table.from_runs([("A", runs["base"]), ("A", runs["uvla"])])


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"task": "vqa", "metrics": {"test": 0.5}}, "field 'task': expected one of"),
        (
            {"task": "vqa2", "metrics": {"test": 72.1}},
            r"metrics\.test: expected a fraction in \[0, 1\]",
        ),
        ({"task": "vqa2", "metrics": {"test-dev": 0.7}}, "metrics key 'test-dev'"),
        ({"task": "vqa2", "metrics": {}}, "field 'metrics'"),
        ([{"task": "vqa2", "metrics": {"test": 0.5}}, 3], r"\[entry 1\]: expected an object"),
    ],
)
def test_bad_results_files_are_named(tmp_path, entry, message):
    (tmp_path / "results.json").write_text(json.dumps(entry))
    with pytest.raises(ValueError, match=message) as error:
        collect_run(tmp_path)
    assert str(tmp_path / "results.json") in str(error.value)


def test_conflicts_and_missing_runs(tmp_path, capsys):
    _log(tmp_path / "a", "progress: 1/1, test/vqa2/vqa_accuracy: 0.5000")
    _log(tmp_path / "b", "progress: 1/1, test/vqa2/vqa_accuracy: 0.6000")
    with pytest.raises(ValueError, match=r"two values for vqa2 test: 0.5 \(.*a/train.log.*0.6"):
        collect_run(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        _tool().main(["--run", f"X={tmp_path / 'nowhere'}", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "run folder not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no train.log or results.json under"):
        collect_run(tmp_path / "empty")


def test_the_report_package_imports_nothing_of_the_replication_study():
    """The import graph is one-way: mmf_uvlp.replication builds on mmf_uvlp.report."""
    imported = set()
    for path in (REPO / "mmf_uvlp" / "report").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {(path.name, node.module)}
            elif isinstance(node, ast.Import):
                imported |= {(path.name, alias.name) for alias in node.names}
    assert ("vqa_breakdown.py", "mmf_uvlp.report.trivial") in imported
    assert [(f, m) for f, m in imported if m.startswith("mmf_uvlp.replication")] == []
