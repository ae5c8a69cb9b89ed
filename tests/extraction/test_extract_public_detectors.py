"""VinVL's ``vinvl_vg_x152c4.pth`` and MMF's vmb ``detectron_model.pth`` as users have them.

Each is a checkpoint of random tensors under every key, shape and dtype of the public file
(tests/fixtures/detector_checkpoints/), saved as the public file is
(``torch.save({"model": state_dict})``), given to ``uvlp-extract-features --recipe`` as a user's
file: docs/own-data.md's command for it, run as written in a folder holding the files it
names, with CPU-sized settings appended (small images, few proposals, one thread). It loads
whole; a renamed key and a changed shape make the run refuse before the first image, naming
both (the framework's own tests refuse each alone).
"""

import json
import re
import shlex

import numpy as np
import pytest

from helpers import REPO
from helpers.extraction import NO_DETECTRON2, extract_cli, write_photos

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

import torch  # noqa: E402

from helpers.checkpoints import manifest, public_checkpoint, write_pth  # noqa: E402

DOC = REPO / "docs" / "own-data.md"
# appended to the documented command: CPU-sized images and proposals
CPU = [
    "--device",
    "cpu",
    "--threads",
    "1",
    "--no-progress",
    "--proposals",
    "12",
    "--min-boxes",
    "4",
    "--max-boxes",
    "6",
    "--opts",
    "INPUT.MIN_SIZE_TEST",
    "128",
    "INPUT.MAX_SIZE_TEST",
    "160",
]
VINVL, VMB = "vinvl_vg_x152c4", "mmf_vmb_X101_64x4d_FPN"


def documented(recipe: str):
    """The arguments of docs/own-data.md's ``uvlp-extract-features --recipe <recipe>``."""
    text = DOC.read_text(encoding="utf-8")
    for block in re.findall(r"^```text\n(.*?)^```$", text, flags=re.S | re.M):
        if f"--recipe {recipe} " in block:
            words = shlex.split(block.replace("\\\n", " "))
            assert words[0] == "uvlp-extract-features", block
            return words[1:]
    raise AssertionError(f"{DOC}: no command of --recipe {recipe}")


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A folder as a user has it: two photographs, the label maps, the public files."""
    folder = tmp_path_factory.mktemp("user")
    write_photos(folder / "my_images")
    for name in ("chelsea",):  # two photographs are enough on a CPU
        (folder / "my_images" / f"{name}.png").unlink()
    vg = {
        "label_to_idx": {f"object{i}": i for i in range(1, 1595)},
        "attribute_to_idx": {f"attribute{i}": i for i in range(1, 525)},
    }
    (folder / "VG-SGG-dicts-vgoi6-clipped.json").write_text(json.dumps(vg))
    (folder / "vg_classes.txt").write_text("".join(f"vg{i}\n" for i in range(1600)))
    public_checkpoint(VINVL, folder / "vinvl_vg_x152c4.pth")
    public_checkpoint(VMB, folder / "detectron_model.pth")
    return folder


def _run(user, recipe, *extra, check=True):
    return extract_cli(*documented(recipe), *CPU, *extra, cwd=user, check=check)


@pytest.mark.parametrize("recipe, name, dim", [("vinvl", VINVL, 2048 + 6), ("mmf-vmb", VMB, 2048)])
def test_the_public_file_loads_whole_and_writes_mmf_s_own_files(user, recipe, name, dim):
    result = _run(user, recipe)
    args = documented(recipe)
    out, mmf = user / args[args.index("--out") + 1], user / args[args.index("--mmf-out") + 1]
    report = json.loads((out / "report.json").read_text())
    weights = report["weights"]
    assert weights["status"] == "whole", result.stderr[-2000:]
    assert weights["tensors_in_file"] == weights["loaded"] == len(manifest(name))
    assert report["images_written"] == 2 and report["regions"] > 0
    for key in ("astronaut", "coffee"):
        features = np.load(mmf / f"{key}.npy")
        info = np.load(mmf / f"{key}_info.npy", allow_pickle=True).item()
        assert features.shape[1] == dim and np.isfinite(features).all()
        assert len(features) == len(info["bbox"])
    if recipe == "vinvl":
        assert sorted(info) == sorted(
            [
                "labels",
                "scores",
                "box_features",
                "scores_all",
                "boxes_all",
                "attr_labels",
                "attr_scores",
                "bbox",
                "image_width",
                "image_height",
            ]
        )
        assert info["scores_all"].shape[1] == 1595 and info["attr_labels"].shape[1] == 16
        assert list(info["scores"]) == sorted(info["scores"], reverse=True)
        assert np.array_equal(features[:, :2048], info["box_features"])
    else:
        assert sorted(info) == sorted(
            ["bbox", "num_boxes", "objects", "cls_prob", "image_width", "image_height"]
        )
        assert info["cls_prob"].shape == (len(features), 1600)


def _variant(user, public_name):
    """The public file with one key renamed and another tensor one row short."""
    state = torch.load(user / public_name, weights_only=True)["model"]
    state["rpn.head.conv.weights"] = state.pop("rpn.head.conv.weight")
    bias = state["roi_heads.box.predictor.cls_score.bias"]
    state["roi_heads.box.predictor.cls_score.bias"] = bias[:-1].clone()
    path = user / "variant" / public_name
    path.parent.mkdir(exist_ok=True)
    return write_pth(path, {k: v.numpy() for k, v in state.items()})


@pytest.mark.parametrize(
    "recipe, public_name", [("vinvl", "vinvl_vg_x152c4.pth"), ("mmf-vmb", "detectron_model.pth")]
)
def test_a_renamed_key_and_a_changed_shape_are_refused_in_one_line(
    user, recipe, public_name, tmp_path
):
    path = _variant(user, public_name)
    args = documented(recipe)
    args[args.index("--weights") + 1] = str(path)
    args[args.index("--out") + 1] = str(tmp_path / "raw")
    args[args.index("--mmf-out") + 1] = str(tmp_path / "mmf")
    result = extract_cli(*args, *CPU, cwd=user, check=False)
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(f"extract_features: error: {path}: "), (
        result.stderr
    )
    # the renamed key in the file's own spelling, the short one under the detector's name
    assert "1 unexpected (first: rpn.head.conv.weights)" in errors[0]
    assert "1 missing (first: proposal_generator.rpn_head.conv.weight)" in errors[0]
    assert "1 mis-shaped (first: roi_heads.box_predictor.cls_score.bias" in errors[0]
    assert not (tmp_path / "raw" / "predictions.tsv").exists()
    assert not (tmp_path / "mmf").exists()
