"""RefCOCO+ for MMF: the builders, the samples, IoU and the refcoco_accuracy metric."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmf.common.registry import registry
from mmf.common.sample import SampleList
from mmf.utils.build import build_dataloader_and_sampler, build_dataset
from omegaconf import OmegaConf

import mmf_uvlp  # noqa: F401  (installs the compatibility layer before MMF)
from mmf_uvlp.data_formats import FormatError
from mmf_uvlp.datasets.builders.refcoco_plus import RefCOCOPlusBuilder
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.metrics.refcoco import RefCOCOAccuracy
from mmf_uvlp.utils.boxes import iou

from helpers import REPO


VIEWS = {"refcoco_plus_val": "val", "refcoco_plus_testA": "testA", "refcoco_plus_testB": "testB"}

# Two crafted images; proposals (x1, y1, x2, y2) with IoUs known by hand.
IMAGES = {
    1: {"size": (100, 100), "proposals": [[0, 0, 50, 50], [50, 50, 100, 100], [0, 0, 100, 100]]},
    2: {"size": (200, 100), "proposals": [[0, 0, 100, 100], [100, 0, 200, 100]]},
}
# ann_id -> (image_id, COCO xywh gold box); IoU with the proposals of its image:
ANNOTATIONS = {
    11: (1, [0, 0, 50, 50]),  # 1, 0, 0.25        -> targets [1, 0, 0]
    12: (1, [10, 10, 30, 30]),  # 0.36, 0, 0.09     -> no good proposal, kept as a miss
    21: (2, [100, 0, 100, 100]),  # 0, 1              -> [0, 1]
    22: (2, [0, 0, 100, 50]),  # 0.5 exactly, 0    -> [1, 0]
}
REFS = [  # (ref_id, ann_id, split, sentences)
    (0, 11, "train", ["the top left square"]),
    (1, 12, "val", ["a small box", "the small square inside"]),
    (2, 21, "testA", ["right man"]),
    (3, 22, "testB", ["upper half of the left one"]),
]


def _name(image_id: int) -> str:
    return f"COCO_train2014_{image_id:012d}"


def _write_refer(root: Path, refs=REFS, annotations=ANNOTATIONS) -> None:
    folder = root / "refer" / "refcoco+"
    folder.mkdir(parents=True)
    images = [
        {"id": i, "file_name": _name(i) + ".jpg", "width": im["size"][0], "height": im["size"][1]}
        for i, im in IMAGES.items()
    ]
    anns = [
        {
            "id": a,
            "image_id": i,
            "category_id": 1,
            "bbox": box,
            "area": box[2] * box[3],
            "iscrowd": 0,
        }
        for a, (i, box) in annotations.items()
    ]
    instances = {
        "images": images,
        "annotations": anns,
        "categories": [{"id": 1, "name": "thing", "supercategory": "thing"}],
    }
    (folder / "instances.json").write_text(json.dumps(instances))
    sent_id = 100
    ref_list = []
    for ref_id, ann_id, split, sentences in refs:
        sents = []
        for text in sentences:
            sents.append({"sent": text, "raw": text, "tokens": text.split(), "sent_id": sent_id})
            sent_id += 1
        ref_list.append(
            {
                "ref_id": ref_id,
                "ann_id": ann_id,
                "image_id": ANNOTATIONS[ann_id][0] if ann_id in ANNOTATIONS else 1,
                "split": split,
                "category_id": 1,
                "file_name": _name(1) + "_0.jpg",
                "sent_ids": [s["sent_id"] for s in sents],
                "sentences": sents,
            }
        )
    with open(folder / "refs(unc).p", "wb") as f:
        pickle.dump(ref_list, f)


def _write_features(root: Path, sizes=None) -> None:
    folder = root / "features" / "coco"
    folder.mkdir(parents=True)
    for image_id, image in IMAGES.items():
        boxes = np.array(image["proposals"], dtype=np.float32)
        width, height = (sizes or {}).get(image_id, image["size"])
        np.save(
            folder / f"{_name(image_id)}.npy", np.full((len(boxes), 8), image_id, dtype=np.float32)
        )
        np.save(
            folder / f"{_name(image_id)}_info.npy",
            {
                "bbox": boxes,
                "num_boxes": len(boxes),
                "image_width": width,
                "image_height": height,
                "objects": np.zeros(len(boxes), dtype=np.int64),
            },
            allow_pickle=True,
        )


def _config(data_dir: Path, **changes):
    config = {
        "data_dir": str(data_dir),
        "use_features": True,
        "return_features_info": True,
        "max_features": 4,
        "fast_read": False,
        "split_by": "unc",
        "annotations": {t: ["refer/refcoco+"] for t in ("train", "val", "test")},
        "features": {t: ["features/coco"] for t in ("train", "val", "test")},
        "refer_splits": {"train": ["train"], "val": ["val"], "test": ["testA", "testB"]},
        "processors": {
            "text_processor": {
                "type": "bert_tokenizer",
                "params": {
                    "tokenizer_config": {
                        "type": os.environ["UVLP_BERT"],
                        "params": {"do_lower_case": True},
                    },
                    "mask_probability": 0,
                    "max_seq_length": 8,
                },
            }
        },
    }
    config.update(changes)
    return OmegaConf.create(config)


@pytest.fixture(autouse=True)
def _fresh_processors():
    """MMF reuses a processor registered under ``<dataset>_text_processor``; start clean."""
    yield
    for name in ["refcoco_plus", *VIEWS]:
        registry.unregister(f"{name}_text_processor")


@pytest.fixture
def crafted(tmp_path) -> Path:
    _write_refer(tmp_path)
    _write_features(tmp_path)
    return tmp_path


def _samples(dataset) -> list:
    return [dataset[i] for i in range(len(dataset))]


# ----------------------------------------------------------------------------- boxes, metric
def test_iou_pairwise_on_hand_made_boxes():
    a = torch.tensor([[0, 0, 50, 50], [0, 0, 100, 100], [0, 0, 0, 0]], dtype=torch.float)
    b = torch.tensor([[0, 0, 50, 50], [25, 0, 75, 50], [200, 200, 300, 300]], dtype=torch.float)
    expected = torch.tensor([[1, 1 / 3, 0], [0.25, 0.25, 0], [0, 0, 0]])
    assert torch.allclose(iou(a, b), expected)
    batched = iou(a.unsqueeze(0).expand(2, -1, -1), b[:1].unsqueeze(0).expand(2, -1, -1))
    assert batched.shape == (2, 3, 1) and torch.allclose(batched[1, :, 0], expected[:, 0])
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
        iou(torch.zeros(2, 5), b)


def test_refcoco_accuracy_top_proposal_padding_and_no_hit():
    boxes = torch.tensor(
        [
            [[0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 0, 0]],  # hit: top proposal overlaps gold
            [[0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 10, 10]],  # padding scored highest: ignored
            [[0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 0, 0]],  # top proposal misses
            [[0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 0, 0]],  # no proposal at IoU >= 0.5
            [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],  # no proposal at all
        ],
        dtype=torch.float,
    )
    gold = torch.tensor(
        [[0, 0, 10, 12], [50, 50, 60, 60], [50, 50, 60, 60], [100, 100, 120, 120], [0, 0, 10, 10]],
        dtype=torch.float,
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]])
    scores = torch.tensor(
        [[2.0, 1.0, 9.0], [0.0, 1.0, 9.0], [3.0, 1.0, 0.0], [1.0, 2.0, 0.0], [1.0, 2.0, 3.0]]
    )
    batch = {"proposal_boxes": boxes, "gold_box": gold, "region_mask": mask}
    metric = RefCOCOAccuracy()
    assert set(metric.required_params) == {"scores", "proposal_boxes", "gold_box", "region_mask"}
    assert metric.calculate(batch, {"scores": scores}).item() == pytest.approx(2 / 5)
    # Even perfect scores cannot hit an expression without a good proposal.
    perfect = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 1.0, 0], [1.0, 0, 0], [1.0, 0, 0]])
    assert metric.calculate(batch, {"scores": perfect}).item() == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="scores \\(B, R\\)"):
        metric.calculate(batch, {"scores": scores[:, :2]})
    assert registry.get_metric_class("refcoco_accuracy") is RefCOCOAccuracy


# ----------------------------------------------------------------------------- crafted refer
def test_samples_of_a_crafted_refer_file(crafted):
    assert registry.get_builder_class("refcoco_plus") is RefCOCOPlusBuilder
    train = build_dataset("refcoco_plus", _config(crafted), "train")
    (sample,) = _samples(train)
    assert sample.input_ids.shape == sample.input_mask.shape == sample.segment_ids.shape == (8,)
    assert sample.image_feature_0.shape == (4, 8)
    assert torch.all(sample.image_feature_0[:3] == 1) and torch.all(sample.image_feature_0[3] == 0)
    info = sample.image_info_0
    assert int(info.max_features) == 3 and info.image_width == 100 and info.image_height == 100
    assert np.array_equal(info.bbox, np.array(IMAGES[1]["proposals"], dtype=np.float32))
    assert sample.targets.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert sample.region_mask.tolist() == [1, 1, 1, 0]
    assert sample.gold_box.tolist() == [0, 0, 50, 50]
    assert sample.proposal_boxes[:3].tolist() == IMAGES[1]["proposals"]
    assert sample.proposal_boxes[3].tolist() == [0, 0, 0, 0]
    assert torch.allclose(sample.region_boxes[1], torch.tensor([0.5, 0.5, 1.0, 1.0, 0.25]))
    assert sample.region_boxes[3].tolist() == [0] * 5
    assert int(sample.ref_id) == 0 and int(sample.sentence_id) == 100

    # Both sentences of a ref without a good proposal are kept, with no positive target.
    val = _samples(build_dataset("refcoco_plus", _config(crafted), "val"))
    assert [int(s.sentence_id) for s in val] == [101, 102]
    assert all(s.targets.sum() == 0 for s in val)

    # test = testA + testB; IoU exactly 0.5 counts as a hit.
    test = build_dataset("refcoco_plus", _config(crafted), "test")
    assert test.dataset_name == "refcoco_plus"
    assert [s.targets.tolist() for s in _samples(test)] == [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert [s.image_feature_0[0, 0].item() for s in _samples(test)] == [2, 2]


def test_evaluation_views_read_one_refer_split_each(crafted):
    expected = {"refcoco_plus_val": [1, 1], "refcoco_plus_testA": [2], "refcoco_plus_testB": [3]}
    for name, split in VIEWS.items():
        refer_splits = {"train": ["train"], "val": ["val"], "test": [split]}
        dataset = build_dataset(name, _config(crafted, refer_splits=refer_splits), "test")
        assert dataset.dataset_name == name
        assert [int(s.ref_id) for s in _samples(dataset)] == expected[name]


def test_clear_errors(crafted, tmp_path_factory):
    with pytest.raises(
        UserConfigError, match=r"refer_splits\.test: expected .*'testB'\], got \['test'\]"
    ):
        build_dataset("refcoco_plus", _config(crafted, refer_splits={"test": ["test"]}), "test")
    with pytest.raises(UserConfigError, match="use_features: true"):
        build_dataset("refcoco_plus", _config(crafted, use_features=False), "train")

    # A ref whose annotation is not in instances.json: the refs file and the field are named.
    broken = tmp_path_factory.mktemp("broken")
    _write_refer(broken, refs=REFS + [(4, 99, "train", ["ghost"])])
    _write_features(broken)
    with pytest.raises(FormatError, match=r"refs\(unc\)\.p.*'ann_id'.*instances\.json, got 99"):
        build_dataset("refcoco_plus", _config(broken), "train")

    # Proposal boxes in the pixels of another image size would give wrong IoUs.
    resized = tmp_path_factory.mktemp("resized")
    _write_refer(resized)
    _write_features(resized, sizes={1: (50, 50)})
    dataset = build_dataset("refcoco_plus", _config(resized), "train")
    with pytest.raises(ValueError, match=r"COCO_train2014_000000000001\.npy: image size 50x50"):
        dataset[0]


# ----------------------------------------------------------------------------- toy world
@pytest.fixture
def mmf_config(tiny_world):
    """MMF's full configuration with all four RefCOCO+ data sets, registered like mmf_run does."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    previous = registry.get("config", no_warning=True)
    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    datasets = ",".join(["refcoco_plus", *VIEWS])
    args = argparse.Namespace(
        config_override=None,
        opts=[
            "model=uvla",
            f"datasets={datasets}",
            f"env.data_dir={tiny_world}",
            "training.batch_size=4",
            "training.num_workers=0",
        ],
    )
    config = Configuration(args).get_config()
    registry.register("config", config)
    yield config
    registry.register("config", previous)


def test_toy_world_through_mmf_registry_and_dataloader(mmf_config, tiny_world):
    counts = json.loads((tiny_world / "world.json").read_text())["counts"]["refcoco+"]["sentences"]
    dataset = build_dataset("refcoco_plus", mmf_config.dataset_config.refcoco_plus, "train")
    assert len(dataset) == counts["train"]
    loader, _ = build_dataloader_and_sampler(dataset, mmf_config.training)
    batch = next(iter(loader))
    assert isinstance(batch, SampleList) and batch.dataset_name == "refcoco_plus"
    regions = mmf_config.dataset_config.refcoco_plus.max_features
    assert batch.input_ids.shape == (4, 24) and batch.image_feature_0.shape == (4, regions, 64)
    assert batch.targets.shape == batch.region_mask.shape == (4, regions)
    assert batch.proposal_boxes.shape == (4, regions, 4) and batch.gold_box.shape == (4, 4)
    assert batch.region_boxes.shape == (4, regions, 5) and batch.ref_id.shape == (4,)
    assert torch.equal(batch.region_mask.sum(1), batch.image_info_0.max_features)
    assert torch.all(batch.targets * (1 - batch.region_mask) == 0)

    for name, split in VIEWS.items():
        view = build_dataset(name, mmf_config.dataset_config[name], "test")
        assert len(view) == counts[split] and view.dataset_name == name
        # Scoring the targets themselves reaches the upper bound: expressions with a hit.
        samples = SampleList(_samples(view))
        accuracy = RefCOCOAccuracy().calculate(samples, {"scores": samples.targets})
        assert accuracy.item() == pytest.approx(float((samples.targets.sum(1) > 0).float().mean()))


@pytest.mark.slow
def test_mmf_run_trains_and_reports_a_refcoco_view(tiny_world, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"""includes:
- {REPO / "configs/models/uvla/tiny_random.yaml"}
model_config:
  uvla:
    feature_dim: 64
    num_region_classes: 185
    heads: [region_scorer]
    curriculum: {{enabled: false}}
    losses: [{{type: logit_bce}}]
evaluation: {{metrics: [refcoco_accuracy]}}
training: {{batch_size: 8, max_updates: 2, log_interval: 2, evaluation_interval: 2,
           checkpoint_interval: 2, num_workers: 0, seed: 1, tensorboard: false}}
optimizer: {{type: adam_w, params: {{lr: 1.0e-4, eps: 1.0e-8}}}}
scheduler: {{params: {{num_warmup_steps: 1, num_training_steps: 2}}}}
""")
    mmf_run = str(Path(sys.executable).with_name("mmf_run"))
    common = [mmf_run, f"config={config}", "model=uvla", f"env.data_dir={tiny_world}"]
    for opts in (
        ["datasets=refcoco_plus", f"env.save_dir={tmp_path / 'train'}", "run_type=train_val"],
        [
            "datasets=refcoco_plus_testB",
            f"env.save_dir={tmp_path / 'testB'}",
            "run_type=inference",
            f"checkpoint.resume_file={tmp_path / 'train/current.ckpt'}",
        ],
    ):
        result = subprocess.run(
            common + opts, capture_output=True, text=True, timeout=600, cwd=REPO
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    log = (tmp_path / "testB" / "train.log").read_text()
    assert re.search(r"test/refcoco_plus_testB/refcoco_accuracy: [0-9.]+", log)

    from mmf_uvlp.report import collect_run

    cells = collect_run(tmp_path).cells
    assert set(cells) == {("refcoco_plus", "val"), ("refcoco_plus", "testB")}


def test_predictions_name_the_top_scored_box():
    from types import SimpleNamespace

    from mmf_uvlp.datasets.builders.refcoco_plus.dataset import RefCOCOPlusDataset

    report = SimpleNamespace(
        scores=torch.tensor([[0.1, 0.9, 5.0], [2.0, 0.5, 0.0]]),
        region_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),  # row 0's best real region is 1
        proposal_boxes=torch.tensor(
            [
                [[0.0, 0, 10, 10], [20, 20, 40, 40], [0, 0, 1, 1]],
                [[0.0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 5, 5]],
            ]
        ),
        gold_box=torch.tensor([[20.0, 20, 40, 40], [50, 50, 60, 60]]),
        ref_id=torch.tensor([7, 8]),
        sentence_id=torch.tensor([70, 80]),
    )
    predictions = RefCOCOPlusDataset.format_for_prediction(None, report)
    assert predictions == [
        {"ref_id": 7, "sentence_id": 70, "box": [20.0, 20.0, 40.0, 40.0], "correct": True},
        {"ref_id": 8, "sentence_id": 80, "box": [0.0, 0.0, 10.0, 10.0], "correct": False},
    ]
