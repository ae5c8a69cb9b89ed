"""``mmf_predict`` on each of the four tasks, as documented: a short fine-tuning with the
task's run config, then its test split predicted from the run's ``current.ckpt``; one
prediction per test item, named by the item's id in the world's own annotation files (read
here with ``json`` and ``pickle``, not by the plugin's readers). RefCOCO+ is predicted per
refer split (val, testA, testB), one report each."""

from __future__ import annotations

import glob
import json
import pickle
import sys
from pathlib import Path

import pytest

from helpers import fork_server, mmf_run
from helpers import REPO

pytestmark = pytest.mark.slow

MMF_PREDICT = str(Path(sys.executable).with_name("mmf_predict"))
SHORT = [
    "model_config.uvla.feature_dim=64",
    "model_config.uvla.pretrained_checkpoint=None",
    "training.max_updates=2",
    "training.batch_size=8",
    "training.log_interval=1",
    "training.checkpoint_interval=2",
    "training.evaluation_interval=2",
    "scheduler.params.num_warmup_steps=1",
]


def _jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fine_tune_and_predict(task: str, world: Path, save: Path, *predict: str) -> list:
    """The reports ``mmf_predict`` wrote (each a list of predictions), sorted by file name."""
    config = f"config=projects/uvla/finetune/{task}.yaml"
    mmf_run(config, f"env.data_dir={world}", f"env.save_dir={save}", *SHORT)
    result = fork_server().run(
        [
            MMF_PREDICT,
            config,
            "run_type=test",
            f"env.data_dir={world}",
            f"env.save_dir={save}",
            *SHORT[:2],
            f"checkpoint.resume_file={save / 'current.ckpt'}",
            *predict,
        ],
        cwd=REPO,
        timeout=600,
    )
    assert result["returncode"] == 0, str(result["output"])[-4000:]
    files = sorted(glob.glob(str(save / "**" / "reports" / "*.json"), recursive=True))
    assert files, str(result["output"])[-3000:]
    return [json.loads(Path(file).read_text()) for file in files]


def test_nlvr2_predicts_true_or_false_for_every_test_statement(tiny_world, tmp_path):
    (report,) = _fine_tune_and_predict("nlvr2", tiny_world, tmp_path / "nlvr2")
    expected = [
        item["identifier"] for item in _jsonl(tiny_world / "mmf/nlvr2/annotations/test1.jsonl")
    ]
    assert sorted(p["identifier"] for p in report) == sorted(expected)
    assert {p["prediction"] for p in report} <= {"True", "False"}


def test_visual_entailment_predicts_a_label_for_every_test_hypothesis(tiny_world, tmp_path):
    (report,) = _fine_tune_and_predict("visual_entailment", tiny_world, tmp_path / "ve")
    expected = [
        item["pairID"]
        for item in _jsonl(tiny_world / "mmf/visual_entailment/annotations/snli_ve_test.jsonl")
    ]
    assert sorted(p["pairID"] for p in report) == sorted(expected)
    assert {p["prediction"] for p in report} <= {"entailment", "neutral", "contradiction"}


def test_vqa2_predicts_an_answer_for_every_test_question(tiny_world, tmp_path):
    import numpy as np

    (report,) = _fine_tune_and_predict("vqa2", tiny_world, tmp_path / "vqa2")
    questions = np.load(tiny_world / "mmf/vqa2/annotations/imdb_test.npy", allow_pickle=True)[1:]
    vocabulary = set((tiny_world / "mmf/vqa2/vocabs/answers_vqa.txt").read_text().split("\n"))
    assert sorted(p["question_id"] for p in report) == sorted(q["question_id"] for q in questions)
    assert all(p["answer"] in vocabulary for p in report)


def test_refcoco_plus_predicts_a_box_for_every_expression_of_each_split(tiny_world, tmp_path):
    splits = ("val", "testA", "testB")
    reports = _fine_tune_and_predict(
        "refcoco_plus",
        tiny_world,
        tmp_path / "refcoco",
        "datasets=" + ",".join(f"refcoco_plus_{split}" for split in splits),
    )
    with open(tiny_world / "refer/refcoco+/refs(unc).p", "rb") as handle:
        refs = pickle.load(handle)
    expected = {
        split: sorted(
            (ref["ref_id"], sentence["sent_id"])
            for ref in refs
            if ref["split"] == split
            for sentence in ref["sentences"]
        )
        for split in splits
    }
    written = sorted(sorted((p["ref_id"], p["sentence_id"]) for p in report) for report in reports)
    assert written == sorted(expected.values())
    assert all(
        len(p["box"]) == 4 and isinstance(p["correct"], bool) for report in reports for p in report
    )
