"""A non-finite training loss stops the run with one line naming the update, the dataset
and the samples, before the optimizer writes NaN into the weights."""

import math
import pickle
import shutil
import subprocess
from pathlib import Path

import lmdb
import pytest
import torch

from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase
from mmf_uvlp.trainers.finite_loss import NonFiniteLoss, check_finite_loss

from helpers import HOLDOUT, MMF_RUN, REPO, TINY


BATCH_IDS = ["cc_000003", "cc_000007", "cc_000012"]


def batch_with(value: float) -> dict:
    features = torch.ones(3, 4, 8)
    features[1, 2, 5] = value
    return {
        "image_id": list(BATCH_IDS),
        "image_feature_0": features,
        "image_info_0": {"bbox": features[:, :, :4]},
        "input_ids": torch.ones(3, 6).long(),
    }


def losses(value: float) -> dict:
    return {
        "train/uvla_region_tag/uvla_mlm": torch.tensor(2.0),
        "train/uvla_region_tag/uvla_mrfr": torch.tensor(value),
    }


def test_a_finite_loss_passes():
    check_finite_loss(losses(1.5), batch_with(1.0), "uvla_region_tag", 3, torch.nn.Linear(2, 2))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_input_is_named_with_its_sample_update_and_dataset(value):
    with pytest.raises(NonFiniteLoss) as error:
        check_finite_loss(
            losses(value), batch_with(value), "uvla_region_tag", 3, torch.nn.Linear(2, 2)
        )
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "non-finite loss at update 3 on dataset uvla_region_tag "
        f"(train/uvla_region_tag/uvla_mrfr: {float(value)})"
    )
    assert (
        "image_id cc_000007 has non-finite values in image_feature_0;" in message
    )  # bbox is finite
    assert "batch of 3: image_id cc_000003, cc_000007, cc_000012" in message
    assert "weights were non-finite" not in message


def test_an_overflow_names_the_largest_input_and_broken_weights_are_named():
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = math.nan
    with pytest.raises(NonFiniteLoss) as error:
        check_finite_loss(losses(math.inf), batch_with(1e30), "uvla_region_tag", 1, model)
    message = str(error.value)
    assert (
        "the inputs are finite; the largest, 1e+30 in image_feature_0 of image_id cc_000007"
        in message
    )
    assert (
        "the model's weights were non-finite before this update (1 tensors, e.g. weight)" in message
    )


def poison(world: Path, value: float) -> str:
    """One feature value of one training image of the corpus set to ``value``; its image id."""
    corpus = AlignedCorpusDatabase(str(world / "corpus"), "image", "train", 6)
    image = corpus[len(corpus) // 2]["image_id"]
    env = lmdb.open(str(world / "features/cc.lmdb"), subdir=True, lock=False)
    with env.begin(write=True) as txn:
        record = pickle.loads(txn.get(image.encode()))
        record["features"][0, 0] = value
        txn.put(image.encode(), pickle.dumps(record))
    env.close()
    return image


def run_poisoned(tiny_corpus, tmp_path: Path, value: float) -> tuple:
    """``mmf_run`` of the tiny pre-training over a world with one feature value set to ``value``."""
    world = tmp_path / "world"
    shutil.copytree(tiny_corpus.parent, world)
    image = poison(world, value)
    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    save = tmp_path / "save"
    command = [
        MMF_RUN,
        f"config={config}",
        f"env.data_dir={world}",
        f"env.save_dir={save}",
        *HOLDOUT,
        "training.max_updates=13",
        "training.checkpoint_interval=1",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    return result, image, world, save


@pytest.mark.slow
def test_one_nan_feature_is_refused_when_read_naming_file_and_image(tiny_corpus, tmp_path):
    result, image, world, _ = run_poisoned(tiny_corpus, tmp_path, math.nan)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"mmf_run: error: {world / 'features/cc.lmdb'} [key '{image}']: field "
        "'features': expected finite values, got '1 NaN (first in row 0)'"
    ), last
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_one_overflowing_feature_stops_pretraining_naming_update_dataset_and_image(
    tiny_corpus, tmp_path
):
    result, image, _, save = run_poisoned(tiny_corpus, tmp_path, 1e30)
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mmf_run: error: non-finite loss at update "), result.stderr[-3000:]
    assert f"the largest, 1e+30 in region_features of image_id {image}" in last, last
    assert "Traceback" not in result.stderr
    update = int(last.split("at update ")[1].split()[0])
    dataset = last.split("on dataset ")[1].split()[0]
    assert dataset.startswith("uvla_")
    assert (
        f"non-finite loss at update {update} on dataset {dataset}"
        in (save / "train.log").read_text()
    )
    # no update was made with the non-finite loss: every checkpoint's weights are finite
    checkpoints = sorted((save / "models").glob("model_*.ckpt"))
    assert len(checkpoints) == update - 1
    for path in checkpoints:
        weights = torch.load(path, weights_only=True)["model"]
        assert all(torch.isfinite(tensor).all() for tensor in weights.values()), path
