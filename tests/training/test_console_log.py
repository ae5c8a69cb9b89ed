"""The console's short progress lines: MMF's full line of every value stays in train.log; the
console shows update, loss, lr, speed and eta, or an evaluation's metrics, in a line a
person reads; other records, and the files, are MMF's own."""

import json
import logging
import re

import pytest
from omegaconf import OmegaConf

from mmf.common.registry import registry
from mmf.utils.logger import Logger
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.trainers.console_log import MAX_CHARS, install, short_line

from helpers import REPO, pretrain, rows, train_log

METRICS = ["vqa_accuracy", "accuracy", "refcoco_accuracy"]
ARCHIVE = REPO / "results/archive/calibrated"
# MMF 1.0.0rc10's lines of a recorded calibrated-world study (its train.log files)
PRETRAIN = (
    "progress: 25/5000, train/total_loss: 46.2883, train/total_loss/avg: 46.2883, "
    "train/uvla_region_tag/uvla_mlm: 9.1305, train/uvla_region_tag/uvla_mlm/avg: 9.1305, "
    "train/uvla_region_tag/uvla_mrc: 32.7121, train/uvla_region_tag/uvla_mrc/avg: 32.7121, "
    "experiment: run, epoch: 1, num_updates: 25, iterations: 25, max_updates: 5000, "
    "lr: 0.00019, ups: 2.27, time: 11s 939ms, time_since_start: 21s 898ms, "
    "eta: 01h 39m 36s 021ms"
)
VALIDATION = (
    "progress: 1500/1500, val/total_loss: 1.3197, val/vqa2/softmax_kldiv: 1.3197, "
    "val/vqa2/vqa_accuracy: 0.3635, num_updates: 1500, epoch: 4, iterations: 1500, "
    "max_updates: 1500, val_time: 05s 256ms, best_update: 1200, best_iteration: 1200, "
    "best_val/vqa2/vqa_accuracy: 0.370500"
)
SPLITS = (
    "progress: 1500/300, test/total_loss: 1.9845, test/refcoco_plus_val/logit_bce: 2.1070, "
    "test/refcoco_plus_testA/logit_bce: 1.8122, test/refcoco_plus_testB/logit_bce: 2.0441, "
    "test/refcoco_plus_val/refcoco_accuracy: 0.8537, "
    "test/refcoco_plus_testA/refcoco_accuracy: 0.9323, "
    "test/refcoco_plus_testB/refcoco_accuracy: 0.8065"
)
PRETRAIN_VALIDATION = (
    "progress: 5000/5000, val/total_loss: 11.1443, val/uvla_region_tag/uvla_mlm: 0.9519, "
    "num_updates: 5000, epoch: 6, iterations: 5000, max_updates: 5000, val_time: 02s 824ms, "
    "best_update: 5000, best_iteration: 5000, best_val/total_loss: 11.144339"
)


@pytest.mark.parametrize(
    "line,short",
    [
        (
            PRETRAIN,
            "update 25/5000 · epoch 1 · loss 46.29 (avg 46.29) · lr 1.9e-4 · 2.27 updates/s "
            "· eta 1h39m",
        ),
        (
            VALIDATION,
            "val · update 1500/1500 · vqa2/vqa_accuracy 0.3635 · best 0.3705 (update 1200)",
        ),
        (
            SPLITS,
            "test · update 1500/300 · refcoco_plus_{val,testA,testB}/refcoco_accuracy 0.8537, "
            "0.9323, 0.8065",
        ),
        (
            PRETRAIN_VALIDATION,
            "val · update 5000/5000 · loss 11.14 · best total_loss 11.14 (update 5000)",
        ),
    ],
)
def test_mmf_s_progress_lines_read_short(line, short):
    assert short_line(line, METRICS) == short
    assert (
        short_line(json.dumps(dict(p.split(": ", 1) for p in line.split(", "))), METRICS) == short
    )


@pytest.mark.parametrize(
    "message",
    [
        "Loading datasets",
        "Torch version is: 2.13.0+cpu",
        "Finished run in 01m 49s 077ms",
        "uvla: loaded 42 pre-trained tensors (embeddings, encoder, pooler) from a.pth",
        "progress: 3/4",
        '{"a": 1}',
        "curriculum: on from update 3 (epoch 0.1, m = 0.1): x",
        "test/vqa2/vqa_accuracy: value '0.7' is not a number",
    ],
)
def test_other_messages_are_left_alone(message):
    assert short_line(message, METRICS) is None


def test_every_line_of_a_recorded_study_is_short_and_shows_its_numbers():
    lines = [
        line.split(" : ", 1)[1]
        for log in sorted(ARCHIVE.glob("*/seed0/*/train.log"))
        for line in log.read_text().splitlines()
        if " : progress: " in line
    ]
    assert len(lines) > 500
    for line in lines:
        short = short_line(line, METRICS)
        assert short is not None and len(short) <= MAX_CHARS, (line, short)
        if ", train/total_loss: " in line:
            update = re.search(r"progress: (\d+/\d+)", line).group(1)
            loss = float(re.search(r"train/total_loss: ([0-9.]+)", line).group(1))
            assert short.startswith(f"update {update} · ") and f"loss {loss:.4g} " in short
        for metric, value in re.findall(r", (?:val|test)/\w+/(\w*accuracy): ([0-9.]+)", line):
            assert re.sub(r"\.?0+$", "", value) in short, (metric, line, short)


@pytest.fixture
def mmf_logger(tmp_path):
    """MMF 1.0.0rc10's own Logger of a run saving to ``tmp_path``, made by the test (its
    console handler then writes to the test's stdout), with train.log and
    logs/train_<time>.log; and the run's config."""
    config = OmegaConf.create(
        {
            "env": {"save_dir": str(tmp_path), "log_dir": ""},
            "training": {
                "log_format": "simple",
                "logger_level": "info",
                "stdout_capture": False,
                "should_not_log": False,
                "console_log": "short",
            },
            "evaluation": {"metrics": [{"type": "vqa_accuracy"}]},
        }
    )
    saved = registry.get("config", None, no_warning=True)
    registry.register("config", config)
    logger = logging.getLogger("mmf.train")
    before = list(logger.handlers)
    try:
        yield lambda: Logger(config, name="mmf.train"), config
    finally:
        for handler in logger.handlers[len(before) :]:
            logger.removeHandler(handler)
            logging.getLogger("py.warnings").removeHandler(handler)
            handler.close()
        registry.register("config", saved)


def test_the_console_is_short_and_the_files_hold_mmf_s_line(mmf_logger, tmp_path, capsys):
    make_writer, config = mmf_logger
    writer = make_writer()
    install(config)
    later = logging.FileHandler(tmp_path / "later.log")  # after the console (MMF main's order)
    logging.getLogger("mmf.train").addHandler(later)
    writer.write("Loading datasets")
    writer.write(VALIDATION)
    logging.getLogger("mmf.train").removeHandler(later)
    later.close()
    assert (tmp_path / "later.log").read_text().endswith(f"{VALIDATION}\n")
    console = capsys.readouterr().out.splitlines()
    assert console[-3].endswith(
        f"console: short progress lines; all values in {tmp_path / 'train.log'} "
        "(training.console_log=full: here too)"
    )
    assert console[-2].endswith("| mmf.train : Loading datasets")
    assert console[-1].endswith(
        "| mmf.train : val · update 1500/1500 · vqa2/vqa_accuracy 0.3635 · best 0.3705 (update 1200)"
    )
    assert len(console[-1]) < 160
    full = (tmp_path / "train.log").read_text()
    assert full.endswith(f"| mmf.train : {VALIDATION}\n") and "console:" not in full
    [dated] = (tmp_path / "logs").glob("train_*.log")
    assert dated.read_text() == full


def test_console_log_full_keeps_mmf_s_line_and_another_value_is_refused(mmf_logger, capsys):
    make_writer, config = mmf_logger
    writer = make_writer()
    install(config)
    config.training.console_log = "full"
    install(config)
    writer.write(PRETRAIN)
    assert capsys.readouterr().out.endswith(f"| mmf.train : {PRETRAIN}\n")
    config.training.console_log = "brief"
    with pytest.raises(
        UserConfigError, match="training.console_log must be 'short' or 'full', got 'brief'"
    ):
        install(config)


@pytest.mark.slow
def test_a_tiny_pretraining_through_mmf_run_logs_short_lines_on_the_console(tiny_corpus, tmp_path):
    save = tmp_path / "save"
    output = pretrain(
        tmp_path,
        tiny_corpus.parent,
        save,
        "training.max_updates=2",
        "training.evaluation_interval=2",
    )
    logged = [line for line in output.splitlines() if " : update " in line or " : val · " in line]
    assert [line.split(" : ", 1)[1].split(" · ", 1)[0] for line in logged] == [
        "update 1/2",
        "update 2/2",
        "val",
    ], output[-3000:]
    assert all(len(line) < 160 for line in logged), logged
    assert "progress:" not in output and f"all values in {save / 'train.log'}" in output
    full = train_log(save)
    assert [row["num_updates"] for row in rows(full)] == ["1", "2"]
    assert "train/uvla_region_tag/uvla_mlm/avg" in full and "time_since_start" in full
    assert re.search(r"progress: 2/2, val/total_loss: [0-9.]+, val/uvla_", full)
    assert len(max(full.splitlines(), key=len)) > 500
