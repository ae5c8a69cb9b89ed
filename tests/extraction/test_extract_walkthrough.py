"""docs/own-data.md's "From your images" runs as written: its first block (the page's
variables) and every ``bash`` block of that section, in order, in one bash process.

The extractor runs in this interpreter (``EXTRACT_PYTHON``, the extractor's environment);
``python`` and ``mmf_run`` are those of the project's environment that it is layered over.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from helpers.extraction import NO_DETECTRON2, PHOTOS

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

from mmf_uvlp.data_formats.mmf_features import LmdbFeatures  # noqa: E402
from mmf_uvlp.corpus import iter_records  # noqa: E402

DOC = REPO / "docs" / "own-data.md"
SECTION = "From your images"


def section_blocks():
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    fences = r"^```bash\n(.*?)^```$"
    first = re.findall(fences, parts[0], flags=re.S | re.M)
    body = dict(zip(parts[1::2], parts[2::2]))[SECTION]
    return first, re.findall(fences, body, flags=re.S | re.M)


def test_the_section_extracts_builds_the_corpus_pretrains_and_fine_tunes():
    first, blocks = section_blocks()
    joined = "\n".join(blocks)
    for command in (
        "-m mmf_uvlp.cli.extract_features",
        "--mmf-out",
        "uvlp-build-corpus",
        "photos_pretrain.yaml",
        "photos_vqa2.yaml",
        "run_type=train_inference",
    ):
        assert command in joined, command


@pytest.mark.slow
def test_from_your_images_runs_as_written(tmp_path):
    first, blocks = section_blocks()
    script = ["set -euo pipefail", first[0]]
    for number, block in enumerate(blocks, start=1):
        script += [f"echo '>>> block {number}' >&2", block]
    project_bin = Path(importlib.util.find_spec("mmf").origin).parents[4] / "bin"
    work = tmp_path / "own_data"
    env = {k: v for k, v in os.environ.items() if k not in ("REPO", "EXAMPLE")}
    env.update(
        WORK=str(work),
        EXTRACT_PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        PATH=f"{project_bin}{os.pathsep}{env['PATH']}",
    )
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

    photos = work / "photos"
    report = json.loads((photos / "raw" / "report.json").read_text())
    assert report["images_written"] == 3 and report["regions"] == 18
    assert "read back through MMF's FeaturesDatabase: 3 of 3 images identical" in output
    with LmdbFeatures(
        photos / "data" / "features" / "photos.lmdb", feature_dim=2048, num_classes=81
    ) as db:
        assert len(db) == 3
    records = list(iter_records(photos / "data" / "corpus"))
    # the builder keeps the images whose tags retrieve sentences (random weights' tags)
    assert records and {r["image_id"] for r in records} <= set(PHOTOS)
    assert (photos / "runs" / "pretrain" / "uvla_final.pth").exists()
    log = (photos / "runs" / "vqa2" / "train.log").read_text()
    assert "loaded" in log and "pre-trained tensors" in log
    assert re.search(r"test/vqa2/vqa_accuracy: [0-9.]+", log)
