"""docs/own-data.md's recipe commands ("From your images": the ``text`` block of
``uvlp-extract-features ... --recipe``) run as written, in a folder holding what they name:
a photograph in ``my_images/``, the public checkpoints' files (random tensors under their
names and shapes, their format) and vocabulary files. ``uvlp-extract-features`` is the
extractor's entry point in this interpreter (the extractor's environment). Each run uses the
recipe's own sizes (600 px, 300 proposals): a few CPU seconds for one photograph."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.checkpoints import BOTTOM_UP, BOTTOM_UP_ATTR, public_checkpoint
from helpers.docs import logical_lines
from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

DOC = REPO / "docs" / "own-data.md"


BOTTOM_UP_RECIPES = ("bottom-up-attention", "lxmert-36")


def recipe_commands(recipes=BOTTOM_UP_RECIPES):
    """The section's commands of ``recipes`` (VinVL's and MMF's are run by
    test_extract_public_detectors.py)."""
    text = DOC.read_text(encoding="utf-8")
    body = text[text.index("\n## From your images\n") :]
    body = body[: body.index("\n## ", 1)]
    blocks = re.findall(r"^```text\n(.*?)^```$", body, flags=re.S | re.M)
    return [
        line
        for block in blocks
        for _, line in logical_lines(block)
        if line.startswith("uvlp-extract-features")
        and "--recipe" in line
        and re.search(r"--recipe (\S+)", line)[1] in recipes
    ]


def test_the_doc_has_a_command_of_every_recipe():
    from mmf_uvlp.extraction.recipes import RECIPES

    commands = recipe_commands(tuple(RECIPES))
    assert (
        [re.search(r"--recipe (\S+)", c)[1] for c in commands]
        == ["bottom-up-attention", "lxmert-36", "vinvl", "mmf-vmb"]
        == list(RECIPES)
    )


@pytest.mark.slow
def test_the_recipe_commands_run_as_written(tmp_path):
    from PIL import Image
    from skimage import data

    (tmp_path / "my_images").mkdir()
    Image.fromarray(data.chelsea()[::3, ::3]).save(tmp_path / "my_images" / "chelsea.jpg")
    public_checkpoint(BOTTOM_UP_ATTR, tmp_path / "faster_rcnn_from_caffe_attr.pkl")
    public_checkpoint(BOTTOM_UP, tmp_path / "faster_rcnn_from_caffe.pkl")
    # the public vocabularies' form: a name a line, synonyms after a comma
    (tmp_path / "objects_vocab.txt").write_text(
        "".join(f"object{i}\n" for i in range(1599)) + "stop sign,stopsign\n"
    )
    (tmp_path / "attributes_vocab.txt").write_text("".join(f"attr{i}\n" for i in range(400)))
    script = [
        'uvlp-extract-features() { "$EXTRACT_PYTHON" -m mmf_uvlp.cli.extract_features "$@"; }',
        "set -euo pipefail",
        *recipe_commands(),
    ]
    env = dict(os.environ, EXTRACT_PYTHON=sys.executable, OMP_NUM_THREADS="1")
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    attr = json.loads((tmp_path / "raw" / "my_images" / "report.json").read_text())
    plain = json.loads((tmp_path / "raw" / "my_images_36" / "report.json").read_text())
    assert attr["weights"]["status"] == plain["weights"]["status"] == "whole"
    assert (attr["num_attributes"], plain["num_attributes"]) == (400, 0)
    assert 10 <= attr["regions"] <= 100 and plain["regions"] == 36
    detector = json.loads((tmp_path / "features" / "my_images.lmdb" / "detector.json").read_text())
    assert detector["weights"]["status"] == "whole"
    assert "read back through MMF's FeaturesDatabase: 1 of 1 images identical" in result.stdout
    assert "WARNING" not in result.stdout
