"""docs/own-data.md runs as written: every ``bash`` block, in order, on the worked example.

The blocks are taken from the page and run unchanged in one bash process from the
repository root; the only input from outside is ``WORK`` (the folder the page writes to,
which it reads as ``${WORK:-...}``) and a ``PATH`` on which ``python`` and ``mmf_run`` are
this environment's.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, read_npy_folder
from mmf_uvlp.data_formats.annotations import read_nlvr2
from mmf_uvlp.corpus import iter_records

from helpers import REPO


DOC = REPO / "docs" / "own-data.md"
TASKS = {
    "vqa2": "vqa_accuracy",
    "nlvr2": "accuracy",
    "visual_entailment": "accuracy",
    "refcoco_plus": "refcoco_accuracy",
}


EXTRACTION = "From your images"  # run in the extractor's environment (tests/extraction)


def sections(text: str) -> list:
    """(heading, body) of the page's ``## `` sections, the text before the first as ``""``."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return [("", parts[0])] + list(zip(parts[1::2], parts[2::2]))


def bash_blocks(text: str, skip: tuple = (EXTRACTION,)) -> list:
    """The contents of the page's ```bash fences, in order, but those of ``skip``'s sections."""
    return [
        block
        for heading, body in sections(text)
        if heading not in skip
        for block in re.findall(r"^```bash\n(.*?)^```$", body, flags=re.S | re.M)
    ]


def test_the_page_has_a_block_for_every_step():
    blocks = bash_blocks(DOC.read_text(encoding="utf-8"))
    joined = "\n".join(blocks)
    for command in (
        "uvlp-convert-features",
        "uvlp-build-corpus",
        "uvlp-convert-nlvr2",
        "mmf_run config=$WORK/configs/pretrain.yaml",
        "run_type=train_inference",
        "refcoco_plus_testB",
        "uvlp-report",
    ):
        assert command in joined, command
    assert "WORK=${WORK:-" in blocks[0]


@pytest.mark.slow
def test_the_walkthrough_runs_as_written_on_the_worked_example(tmp_path):
    blocks = bash_blocks(DOC.read_text(encoding="utf-8"))
    script = ["set -euo pipefail"]
    for number, block in enumerate(blocks, start=1):
        script += [f"echo '>>> block {number}' >&2", block]
    work = tmp_path / "own_data"
    env = {k: v for k, v in os.environ.items() if k not in ("REPO", "EXAMPLE")}
    env.update(WORK=str(work), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]

    data = work / "data"
    for name, images in (("cc.lmdb", 12), ("coco.lmdb", 6), ("nlvr2.lmdb", 16)):
        with LmdbFeatures(data / "features" / name, feature_dim=8, num_classes=9) as db:
            assert len(db) == images, name
    assert len(list(read_npy_folder(data / "features" / "flickr30k", 8, 9))) == 4
    assert output.count("images identical") == 4
    records = list(iter_records(data / "corpus"))
    assert len(records) == 12 and all(r["sentences"] for r in records)
    assert [
        len(list(read_nlvr2(data / "mmf" / "nlvr2" / "annotations" / f"{name}.jsonl")))
        for name in ("train", "dev", "test1")
    ] == [7, 2, 2]
    assert (work / "runs" / "pretrain" / "uvla_final.pth").exists()
    for task, metric in TASKS.items():
        log = (work / "runs" / "uvla" / task / "train.log").read_text()
        assert "loaded" in log and "pre-trained tensors" in log, task
        assert re.search(rf"test/{task}/{metric}: [0-9.]+", log), task
    splits = (work / "runs" / "uvla" / "refcoco_plus_splits" / "train.log").read_text()
    for split in ("val", "testA", "testB"):
        assert re.search(rf"test/refcoco_plus_{split}/refcoco_accuracy: [0-9.]+", splits)
    table = (work / "report" / "table.md").read_text(encoding="utf-8")
    row = next(line for line in table.splitlines() if line.startswith("| μ-VLA"))
    assert "—" not in row and "*" not in row, row
