"""uvlp-extract-features on real photographs (scikit-image's) with random weights: the raw
layout, the selection, determinism, weights files, bad images, kill and resume, two shards."""

import base64
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers.extraction import FAST, NO_DETECTRON2, PHOTOS, extract_cli, write_photos

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

from mmf_uvlp.data_formats.labelmap import load_labelmap  # noqa: E402
from mmf_uvlp.data_formats.vinvl_raw import ImageSizes, parse_detector_row  # noqa: E402
from mmf_uvlp.extraction.run import OUTPUTS  # noqa: E402

FILES = list(OUTPUTS)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return write_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def reference(photos, tmp_path_factory):
    """One uninterrupted run, batch size 2."""
    out = tmp_path_factory.mktemp("reference") / "raw"
    extract_cli("--images", photos, "--out", out, "--batch-size", "2", *FAST)
    return out


def read_rows(out):
    sizes = ImageSizes(out / "hw.tsv")
    labels = load_labelmap(out / "labelmap.json")
    path = out / "predictions.tsv"
    return [
        parse_detector_row(raw, path, line, sizes, labels, feature_dim=2048)
        for line, raw in enumerate(open(path, "rb"), start=1)
    ]


def test_real_photos_give_the_raw_layout_the_project_reads(reference):
    from skimage import data

    rows = read_rows(reference)
    assert [r.prediction.image_id for r in rows] == sorted(PHOTOS)
    for row in rows:
        image = getattr(data, row.prediction.image_id)()
        assert (row.prediction.image_h, row.prediction.image_w) == image.shape[:2]
        assert row.features.shape == (6, 2048) and row.features.dtype == np.float32
        assert np.isfinite(row.features).all() and np.abs(row.features).sum() > 0
        boxes = np.array([o.rect for o in row.prediction.objects])
        assert boxes.shape == (6, 4)
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= image.shape[1]).all()
        assert (boxes[:, 1] >= 0).all() and (boxes[:, 3] <= image.shape[0]).all()
        assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()
    report = json.loads((reference / "report.json").read_text())
    assert report["images_written"] == 3 and report["regions"] == 18
    assert report["feature_dim"] == 2048 and report["num_classes"] == 80
    assert (reference / "problems.tsv").read_text() == ""


def test_another_seed_gives_other_features(photos, reference, tmp_path):
    """(The same seed gives the same bytes: the resumed and the sharded runs below are
    compared with ``reference`` byte for byte, each in new processes.)"""
    other = tmp_path / "other"
    args = [a if a != "0" or FAST[i - 1] != "--random-weights" else "1" for i, a in enumerate(FAST)]
    extract_cli("--images", photos, "--out", other, "--batch-size", "2", *args)
    assert (other / "hw.tsv").read_bytes() == (reference / "hw.tsv").read_bytes()
    assert (other / "predictions.tsv").read_bytes() != (reference / "predictions.tsv").read_bytes()


def test_a_zoo_pkl_and_a_plain_pth_load_to_the_same_output(photos, reference, tmp_path):
    import pickle

    import torch
    from detectron2.modeling import build_model

    from mmf_uvlp.extraction.detector import build_config
    from mmf_uvlp.extraction.selection import Selection

    torch.manual_seed(3)
    cfg = build_config("R50-C4", Selection())
    cfg.MODEL.DEVICE = "cpu"
    state = build_model(cfg).state_dict()
    pkl, pth = tmp_path / "model_final.pkl", tmp_path / "model_final.pth"
    with open(pkl, "wb") as handle:
        pickle.dump(
            {"model": {k: v.numpy() for k, v in state.items()}, "__author__": "test"}, handle
        )
    torch.save({"model": state}, pth)
    fast = [a for a in FAST if a not in ("--random-weights", "0")]
    outputs = []
    for weights in (pkl, pth):
        out = tmp_path / weights.suffix[1:]
        extract_cli(
            "--images", photos, "--out", out, "--weights", weights, "--batch-size", "2", *fast
        )
        outputs.append((out / "predictions.tsv").read_bytes())
    assert outputs[0] == outputs[1]
    # the weights were loaded: seed 3's model, not the random seed 0 of reference
    assert outputs[0] != (reference / "predictions.tsv").read_bytes()


def test_fpn_features_are_1024_d_and_refused_where_the_model_reads_2048(photos, tmp_path):
    fpn = [a if a != "R50-C4" else "R50-FPN" for a in FAST]
    refused = extract_cli("--images", photos, "--out", tmp_path / "a", *fpn, check=False)
    assert refused.returncode == 2
    assert "fc7 output (1024-d)" in refused.stderr
    assert "model_config.uvla.feature_dim" in refused.stderr
    assert not (tmp_path / "a" / "predictions.tsv").exists()
    extract_cli("--images", photos, "--out", tmp_path / "b", *fpn, "--feature-dim", "1024")
    row = json.loads(open(tmp_path / "b" / "predictions.tsv").readline().split("\t")[1])
    assert len(base64.b64decode(row["objects"][0]["feature"])) == 4 * 1024


def _bad_images(folder):
    """Every kind of image the extractor must name, and good ones."""
    from PIL import Image
    from skimage import data

    folder.mkdir()
    photo = Image.fromarray(data.chelsea())  # 451 x 300
    photo.save(folder / "good.jpg")
    photo.convert("L").save(folder / "gray.png")
    photo.convert("CMYK").save(folder / "cmyk.jpg")
    Image.fromarray((np.asarray(photo.convert("L")).astype(np.uint16) * 257)).save(
        folder / "deep.png"
    )
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    photo.save(folder / "turned.jpg", exif=exif)
    photo.resize((40, 20)).save(folder / "tiny.png")
    Image.new("1", (7200, 7000)).save(folder / "huge.png")  # 50.4 MP, a small file
    (folder / "corrupt.jpg").write_bytes(b"not an image at all")
    full = (folder / "good.jpg").read_bytes()
    (folder / "truncated.jpg").write_bytes(full[: len(full) // 2])
    (folder / "again").mkdir()
    photo.save(folder / "again" / "good.png")
    (folder / "notes.txt").write_text("not an image")


def test_every_bad_image_is_named_and_counted_and_the_rest_extracted(tmp_path):
    _bad_images(tmp_path / "images")
    out = tmp_path / "raw"
    result = extract_cli("--images", tmp_path / "images", "--out", out, *FAST)
    rows = {r.prediction.image_id: r.prediction for r in read_rows(out)}
    assert sorted(rows) == ["cmyk", "deep", "good", "gray", "turned"]
    assert (rows["turned"].image_h, rows["turned"].image_w) == (451, 300)
    assert (rows["good"].image_h, rows["good"].image_w) == (300, 451)
    problems = [line.split("\t") for line in (out / "problems.tsv").read_text().splitlines()]
    named = {(p[0], p[2], p[3]) for p in problems}
    assert named == {
        ("good", "skipped", "duplicate_key"),
        ("notes", "skipped", "not_an_image_name"),
        ("corrupt", "skipped", "corrupt"),
        ("truncated", "skipped", "truncated"),
        ("tiny", "skipped", "tiny"),
        ("huge", "skipped", "huge"),
        ("gray", "converted", "grayscale"),
        ("cmyk", "converted", "cmyk"),
        ("deep", "converted", "16bit"),
        ("turned", "converted", "exif_rotated"),
    }
    duplicate = next(p for p in problems if p[3] == "duplicate_key")
    # sorted paths: again/good.png comes first, images/good.jpg is the duplicate
    assert duplicate[1].endswith("images/good.jpg") and "again/good.png" in duplicate[4]
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {
        "corrupt": 1,
        "duplicate_key": 1,
        "huge": 1,
        "not_an_image_name": 1,
        "tiny": 1,
        "truncated": 1,
    }
    assert report["images_written"] == 5
    assert "skipped 6" in result.stdout and "converted 4" in result.stdout


def test_killed_with_sigkill_and_run_again_gives_the_same_bytes(photos, reference, tmp_path):
    out = tmp_path / "raw"
    command = [
        sys.executable,
        "-m",
        "mmf_uvlp.cli.extract_features",
        "--images",
        str(photos),
        "--out",
        str(out),
        "--batch-size",
        "2",
        *FAST,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    state = out / ".extract" / "state.json"
    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        if state.exists() and json.loads(state.read_text())["next"] >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert json.loads(state.read_text())["next"] == 2, "killed after the first batch"
    with open(out / "predictions.tsv", "ab") as handle:  # a half-written row of the next batch
        handle.write(b'coffee\t{"objects": [{"rect"')
    result = extract_cli("--images", photos, "--out", out, "--batch-size", "2", *FAST)
    assert "resumed at image 2" in result.stdout
    for name in FILES:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_two_shards_launched_give_a_single_run_s_bytes(photos, reference, tmp_path):
    out = tmp_path / "launched"
    result = extract_cli(
        "--images",
        photos,
        "--out",
        out,
        "--batch-size",
        "2",
        *FAST,
        "--shards",
        "2",
        "--executor",
        "local",
    )
    assert "2 shards merged" in result.stdout
    for name in FILES:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    shard_rows = [
        len((out / "shards" / d / "predictions.tsv").read_text().splitlines())
        for d in sorted(os.listdir(out / "shards"))
    ]
    assert shard_rows == [2, 1]


def test_other_settings_in_the_same_folder_are_refused(photos, reference, tmp_path):
    import shutil

    out = tmp_path / "raw"
    shutil.copytree(reference, out)
    refused = extract_cli("--images", photos, "--out", out, "--batch-size", "3", *FAST, check=False)
    assert refused.returncode == 2 and "other images or settings" in refused.stderr


def test_an_image_with_no_region_is_written_and_named(photos, tmp_path):
    out = tmp_path / "raw"
    # no proposal is 100,000 px wide: the RPN keeps none
    extract_cli(
        "--images",
        photos,
        "--out",
        out,
        *FAST[:-1],
        FAST[-1],
        "MODEL.PROPOSAL_GENERATOR.MIN_SIZE",
        "100000",
    )
    rows = read_rows(out)
    assert [len(r.prediction.objects) for r in rows] == [0, 0, 0]
    problems = [line.split("\t") for line in (out / "problems.tsv").read_text().splitlines()]
    assert [(p[0], p[2], p[3]) for p in problems] == [
        (key, "written", "no_regions") for key in ("astronaut", "chelsea", "coffee")
    ]
    assert json.loads((out / "report.json").read_text())["converted"] == {"no_regions": 3}
