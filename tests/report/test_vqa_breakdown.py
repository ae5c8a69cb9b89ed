"""VQA accuracy per question type (`uvlp-vqa-breakdown`): hand-computed cases, bad
input, and MMF's own test accuracy reproduced from a real run's prediction file."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from mmf_uvlp.errors import FormatError
from mmf_uvlp.report.vqa_breakdown import (
    ALL,
    breakdown,
    find_predictions,
    prior_breakdown,
    read_predictions,
)
from mmf_uvlp.replication.steps import model_overrides
from mmf_uvlp.cli import vqa_breakdown

from helpers import MMF_RUN, REPO


def _question(qid: int, question_type: str, answers: list[str]) -> dict:
    return {
        "image_id": qid,
        "image_name": f"img{qid}",
        "feature_path": f"img{qid}.npy",
        "question_id": qid,
        "question_str": "q?",
        "question_tokens": ["q"],
        "question_type": question_type,
        "answer_type": "other",
        "answers": answers,
        "all_answers": answers,
    }


QUESTIONS = [
    _question(1, "colour", ["red"] * 10),
    _question(2, "colour", ["blue"] * 10),
    _question(3, "presence", ["yes"] * 8 + ["no"] * 2),
    _question(4, "presence", ["no"] * 10),
]


def _tool():
    return vqa_breakdown


def test_accuracy_per_type_is_the_soft_vqa_score():
    predictions = {1: "red", 2: "red", 3: "no", 4: "no"}
    cells = breakdown(QUESTIONS, predictions, "question_type", "test.npy")
    assert cells["colour"].count == 2 and cells["colour"].accuracy == pytest.approx(0.5)
    # "no" given by 2 of 10 annotators: 8 leave-one-out sets hold 2 (score 2/3), 2 hold 1 (1/3)
    no_score = (8 * 2 / 3 + 2 * 1 / 3) / 10
    assert cells["presence"].accuracy == pytest.approx((no_score + 1.0) / 2)
    assert cells[ALL].count == 4
    assert cells[ALL].accuracy == pytest.approx((1 + 0 + no_score + 1) / 4)


def test_the_prior_answers_each_type_with_its_best_train_answer():
    train = [
        _question(10, "colour", ["blue"] * 10),
        _question(11, "colour", ["blue"] * 10),
        _question(12, "colour", ["red"] * 10),
        _question(13, "presence", ["yes"] * 10),
    ]
    cells = prior_breakdown(train, QUESTIONS, "question_type", "test.npy")
    assert cells["colour"].accuracy == pytest.approx(0.5)  # "blue" everywhere
    assert cells["presence"].accuracy == pytest.approx(0.5)  # "yes": 1 on question 3, 0 on 4


def test_bad_predictions_are_named(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"test\.npy: 1 of 4 questions have no prediction "
        r"\(first: question_id 4\)",
    ):
        breakdown(QUESTIONS, {1: "red", 2: "red", 3: "no"}, "question_type", "test.npy")
    with pytest.raises(FormatError, match=r"test\.npy \[key '1'\]: field 'kind'"):
        breakdown(QUESTIONS, {1: "a", 2: "b", 3: "c", 4: "d"}, "kind", "test.npy")
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"question_id": 1, "answer": "red"}, {"answer": "x"}]))
    with pytest.raises(FormatError, match=r"p\.json \[key '\[1\]'\]: field 'question_id/answer'"):
        read_predictions(path)
    path.write_text("{not json")
    with pytest.raises(FormatError, match=r"p\.json: field 'predictions'"):
        read_predictions(path)
    with pytest.raises(FileNotFoundError, match="evaluation.predict=True"):
        find_predictions(tmp_path)


def test_the_tool_prints_a_table_per_type_with_the_prior(tmp_path, capsys):
    header = {"dataset_name": "vqa2", "version": 1, "has_answer": True}
    test, train = tmp_path / "imdb_test.npy", tmp_path / "imdb_train.npy"
    np.save(test, np.array([header, *QUESTIONS], dtype=object), allow_pickle=True)
    np.save(
        train,
        np.array([header, _question(9, "colour", ["red"] * 10)], dtype=object),
        allow_pickle=True,
    )
    reports = tmp_path / "save" / "vqa2_uvla_0" / "reports"
    reports.mkdir(parents=True)
    answers = {1: "red", 2: "blue", 3: "yes", 4: "no"}
    (reports / "vqa2_run_test_1.json").write_text(
        json.dumps([{"question_id": q, "answer": a} for q, a in answers.items()])
    )
    out = tmp_path / "table.md"
    assert (
        _tool().main(
            [
                "--imdb",
                str(test),
                "--train",
                str(train),
                "--run",
                f"A={tmp_path / 'save'}",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert table.splitlines()[0] == "| question_type | n | A | prior |"
    assert table.splitlines()[2] == "| all | 4 | 100.0 | 25.0 |"
    assert "| colour | 2 | 100.0 | 50.0 |" in table and out.read_text() == table
    # a bare folder, as shell completion writes it (trailing slash), is named after itself
    assert _tool().main(["--imdb", str(test), "--run", f"{tmp_path / 'save'}/"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "| question_type | n | save |"
    assert _tool().main(["--imdb", str(test), "--run", "A=x", "--run", "A=y"]) == 2
    assert "names must be unique" in capsys.readouterr().err


@pytest.mark.slow
def test_the_all_row_equals_mmf_s_logged_test_accuracy(tiny_world, tmp_path):
    save = tmp_path / "save"
    common = [
        MMF_RUN,
        "config=projects/uvla/finetune/vqa2.yaml",
        *model_overrides(REPO / "configs/models/uvla/tiny_random.yaml"),
        "model_config.uvla.feature_dim=64",
        "model_config.uvla.pretrained_checkpoint=None",
        "training.batch_size=8",
        "training.max_updates=4",
        "training.evaluation_interval=4",
        "training.checkpoint_interval=4",
        "scheduler.params.num_warmup_steps=1",
        f"env.data_dir={tiny_world}",
        f"env.save_dir={save}",
    ]
    runs = [
        [*common, "run_type=train_inference", "evaluation.predict=True"],
        [*common, "run_type=inference", f"checkpoint.resume_file={save / 'current.ckpt'}"],
    ]
    for command in runs:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    # MMF's full lines are in train.log (appended by both runs; the console shows short ones)
    full = (save / "train.log").read_text()
    logged = float(re.findall(r"test/vqa2/vqa_accuracy: ([0-9.]+)", full)[-1])
    imdb = tiny_world / "mmf" / "vqa2" / "annotations" / "imdb_test.npy"
    cells = breakdown(
        list(np.load(imdb, allow_pickle=True)[1:]),
        read_predictions(find_predictions(save)),
        "question_type",
        imdb,
    )
    assert cells[ALL].accuracy == pytest.approx(logged, abs=1e-4)
    assert len(cells) > 2  # several question types
