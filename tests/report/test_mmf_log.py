"""MMF's train.log read strictly: a value cut short or two runs in one log are errors naming
the file and line (uvlp-report and the study's tables), or, for a run that may still be
written, values not logged yet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmf_uvlp.errors import LogFormatError
from mmf_uvlp.replication.aggregate import seed_cells
from mmf_uvlp.replication.steps import Step
from mmf_uvlp.report import collect_run, parse_log

from helpers import REPO


PREFIX = "2026-11-25T21:34:00 | INFO | mmf.train : "
TRAIN = PREFIX + (
    "progress: {n}/{m}, train/total_loss: 3.1809, train/total_loss/avg: 3.1809, "
    "experiment: run, epoch: 1, num_updates: {n}, iterations: {n}, "
    "max_updates: {m}, lr: 0.00001, ups: 1.56, time: 16s 405ms"
)
VAL = PREFIX + (
    "progress: {n}/{m}, val/total_loss: 1.2899, val/vqa2/vqa_accuracy: {value}, "
    "num_updates: {n}, epoch: 4, iterations: {n}, max_updates: {m}, "
    "val_time: 04s 608ms, best_update: {n}, best_iteration: {n}, "
    "best_val/vqa2/vqa_accuracy: 0.394000"
)
TEST = PREFIX + "progress: {n}/{m}, test/total_loss: 1.2790, test/vqa2/vqa_accuracy: {value}"
START = PREFIX + "Loading datasets"


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(text)
    return folder / "train.log"


def _run(m: int, test: str = "0.7500") -> str:
    """The lines of one finished run of ``m`` updates."""
    return (
        "\n".join(
            [
                START,
                TRAIN.format(n=m // 2, m=m),
                VAL.format(n=m, m=m, value="0.3940"),
                TEST.format(n=m, m=m, value=test),
            ]
        )
        + "\n"
    )


def test_a_finished_run_and_a_resumed_one_are_read(tmp_path):
    log = _write(tmp_path, _run(4))
    assert parse_log(log) == {
        "val/total_loss": 1.2899,
        "val/vqa2/vqa_accuracy": 0.394,
        "test/total_loss": 1.279,
        "test/vqa2/vqa_accuracy": 0.75,
    }
    # killed after update 2, resumed from its checkpoint: the same run, one log
    resumed = "\n".join([START, TRAIN.format(n=2, m=4), START, TRAIN.format(n=2, m=4)]) + "\n"
    assert parse_log(_write(tmp_path / "r", resumed + _run(4))) == parse_log(log)
    # a finished run resumed once more tests again, to the same values
    assert parse_log(_write(tmp_path / "again", _run(4) + _run(4))) == parse_log(log)


def test_a_number_cut_short_is_an_error_naming_the_file_and_line(tmp_path):
    """0.7500 cut to 0.7 at the end of the file was read as 0.7 (70.0 in the table)."""
    log = _write(tmp_path, _run(4)[:-4])
    assert log.read_text().endswith("test/vqa2/vqa_accuracy: 0.7")
    with pytest.raises(
        LogFormatError,
        match=rf"^{log}:4: .*test/vqa2/vqa_accuracy: value "
        r"'0.7' is not a number as MMF writes it \(4 "
        r"decimals\)",
    ):
        parse_log(log)
    with pytest.raises(
        LogFormatError,
        match=rf"^{log}:4: .*test/vqa2/vqa_accuracy: the file "
        "ends inside this line",
    ):
        parse_log(_write(tmp_path, _run(4)[:-1]))  # complete-looking, but cut after it


def test_a_cut_line_continued_by_the_next_run_counts_only_until_replaced(tmp_path):
    killed = "\n".join([START, TRAIN.format(n=2, m=4), VAL.format(n=4, m=4, value="0.3940")])
    cut = killed[: killed.index("vqa_accuracy: 0.3940") + len("vqa_accuracy: 0.3")]
    log = _write(tmp_path, cut + _run(4))  # the resumed run's first line continues it
    assert parse_log(log)["val/vqa2/vqa_accuracy"] == 0.394  # replaced by a complete value
    log = _write(tmp_path, cut + START + "\n" + TRAIN.format(n=2, m=4) + "\n")
    with pytest.raises(
        LogFormatError,
        match=rf"^{log}:3: val/vqa2/vqa_accuracy: value "
        r"'0.32026-11-25T21:34:00 \| INFO \| mmf.train "
        r": Loading datasets' is not a number",
    ):
        parse_log(log)
    assert "val/vqa2/vqa_accuracy" not in parse_log(log, unfinished=True)


def test_a_cut_json_record_is_an_error(tmp_path):
    record = json.dumps({"progress": "8/8", "test/vqa2/vqa_accuracy": "0.7210"})
    assert parse_log(_write(tmp_path, record + "\n")) == {"test/vqa2/vqa_accuracy": 0.721}
    log = _write(tmp_path, record[:-5])
    with pytest.raises(
        LogFormatError,
        match=rf"^{log}:1: test/vqa2/vqa_accuracy: the json "
        "record does not parse",
    ):
        parse_log(log)


@pytest.mark.parametrize(
    "second, message",
    [
        (
            _run(6, "0.8000"),
            r":6: progress 3/6, where line 2 has 2/4: two runs of different "
            r"lengths in one log",
        ),
        (
            _run(4, "0.8000"),
            r":8: test/vqa2/vqa_accuracy is 0.8000, where line 4 has 0.7500: two "
            r"runs in one log",
        ),
    ],
)
def test_two_runs_appended_to_one_log_are_an_error(tmp_path, second, message):
    """The last value won silently: the table showed whichever run came last."""
    log = _write(tmp_path / "run", _run(4) + second)
    for options in ({}, {"unfinished": True}):
        with pytest.raises(LogFormatError, match=rf"^{log}{message}"):
            parse_log(log, **options)
    with pytest.raises(LogFormatError, match=rf"^{log}{message}"):
        collect_run(tmp_path)


def test_report_names_a_cut_log_in_one_line(tmp_path):
    log = _write(tmp_path / "base" / "vqa2", _run(4)[:-4])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmf_uvlp.cli.report",
            "--run",
            f"Base={tmp_path / 'base'}",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"report: error: {log}:4: ")
    assert "test/vqa2/vqa_accuracy: value '0.7' is not a number" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_studys_tables_refuse_a_damaged_log_of_a_finished_run(tmp_path):
    folder = tmp_path / "vqa2"
    step = Step(
        "finetune",
        "fine-tune on vqa2",
        ("mmf_run",),
        folder,
        folder / "step.json",
        proof_keys=("test/vqa2/vqa_accuracy",),
        system="base",
        seed=0,
        task="vqa2",
    )
    log = _write(folder, _run(4))
    step.record.write_text(json.dumps({"command": ["mmf_run"]}))
    assert seed_cells([step]) == {("base", 0): {("vqa2", "test"): 0.75}}
    # a val value cut by a killed run, never replaced although the run finished
    lines = _run(4).splitlines()
    lines[2] = lines[2].replace("val/vqa2/vqa_accuracy: 0.3940", "val/vqa2/vqa_accuracy: 0.39")
    _write(folder, "\n".join(lines) + "\n")
    assert step.done()
    with pytest.raises(LogFormatError, match=rf"^{log}:3: val/vqa2/vqa_accuracy: value '0.39'"):
        seed_cells([step])
