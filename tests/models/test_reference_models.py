"""The reference models on tiny batches: MMF's VisualBERT and ViLBERT with their ITM and region
heads (``visual_bert_uvlp`` / ``vilbert_uvlp``), VL-BERT (``vl_bert``) with its masking that
never leaks a masked region, and MMF's masked-caption data over the aligned pairs."""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from safetensors.torch import load_file

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.sample import Sample, SampleList
from mmf.utils.build import build_dataset
from mmf.utils.configuration import Configuration, load_yaml
from mmf.utils.env import setup_imports
from mmf_uvlp.datasets.builders.masked_aligned_vlp.builder import MaskedAlignedVLPBuilder
from mmf_uvlp.datasets.databases.image_pool import ImagePoolDatabase
from mmf_uvlp.models.vilbert_uvlp import ViLBERTUVLP
from mmf_uvlp.models.visual_bert_uvlp import VisualBERTUVLP
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.models.vl_bert import VLBERT
from mmf_uvlp.modules.alignment import matching_loss
from mmf_uvlp.modules.heads import PADDED_REGION_SCORE
from mmf_uvlp.modules.vl_bert_embeddings import IMAGE_SEGMENT, sinusoidal_geometry
from mmf_uvlp.reference_models import REFERENCE_MODELS, SYSTEMS
from mmf_uvlp.tasks import TASKS

from helpers import REPO


BERT = os.environ["UVLP_BERT"]
B, L, R, D, V = 3, 6, 4, 8, 50
COUNTS = (4, 2, 3)  # real regions per sample


@pytest.fixture(autouse=True)
def registry_state(tmp_path):
    """A minimal MMF config in the registry (losses, MMF's cache dir, loaders); restored."""
    saved = {key: registry.get(key, None, no_warning=True) for key in ("config", "current_device")}
    registry.register(
        "config",
        OmegaConf.create(
            {
                "env": {"cache_dir": str(tmp_path)},
                "evaluation": {"predict": False},
                "training": {"batch_size": 2, "num_workers": 0, "pin_memory": False},
            }
        ),
    )
    registry.register("current_device", torch.device("cpu"))
    yield
    for key, value in saved.items():
        registry.register(key, value)
    registry.unregister("masked_aligned_vlp_masked_token_processor")


# ---------------------------------------------------------------------------- batches
def _text(sample: Sample, k: int) -> Sample:
    sample.input_ids = torch.tensor([1, 10 + k, 11, 12, 2, 0])
    sample.input_mask = torch.tensor([1, 1, 1, 1, 1, 0])
    sample.segment_ids = torch.zeros(L, dtype=torch.long)
    sample.lm_label_ids = torch.tensor([-1, 10 + k, -1, 12, -1, -1])
    return sample


def _image(count: int) -> Sample:
    """MMF features: rows padded to R, info with the real count, pixel boxes, cls_prob."""
    image = Sample()
    image.image_feature_0 = torch.zeros(R, D)
    image.image_feature_0[:count] = torch.randn(count, D)
    boxes = np.array([[2.0 * r, 1.0, 2.0 * r + 5, 8.0] for r in range(count)], dtype=np.float32)
    image.image_info_0 = {
        "max_features": torch.tensor(count),
        "bbox": boxes,
        "image_width": 20,
        "image_height": 10,
        "cls_prob": np.full((count, 5), 0.2, dtype=np.float32),
    }
    return image


def _mmf_batch(dataset_type: str = "train", is_correct=(1, 0, -1)) -> SampleList:
    """Masked-caption samples as MMF's masked datasets make them (ViLBERT's image_labels too)."""
    samples = []
    for k, count in enumerate(COUNTS):
        sample = _text(_image(count), k)
        sample.is_correct = torch.tensor(is_correct[k])
        sample.image_labels = [1, -1, 1, -1]
        sample.targets = torch.zeros(R)
        samples.append(sample)
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "masked_aligned_vlp", dataset_type
    return batch


def _region_batch() -> SampleList:
    """RefCOCO+-like samples: one target per real region."""
    batch = _mmf_batch("train")
    batch.dataset_name = "refcoco_plus"
    return batch


# -------------------------------------------------------------- MMF's VisualBERT, ViLBERT
def _mmf_model(cls, key: str, **settings):
    """``cls`` built from its defaults file (MMF's defaults + ours) and tiny sizes."""
    node = load_yaml(cls.config_path()).model_config[key]
    node.merge_with(settings)
    torch.manual_seed(0)
    model = cls(node)
    model.build()
    model.init_losses()
    return model


def _visual_bert(head: str, **settings) -> VisualBERTUVLP:
    return _mmf_model(
        VisualBERTUVLP,
        "visual_bert",
        **{
            "bert_model_name": None,
            "random_initialize": False,
            "training_head_type": head,
            "visual_embedding_dim": D,
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "vocab_size": V,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "losses": [],
            **settings,
        },
    )


def _vilbert(head: str, **settings) -> ViLBERTUVLP:
    return _mmf_model(
        ViLBERTUVLP,
        "vilbert",
        **{
            "bert_model_name": None,
            "training_head_type": head,
            "vocab_size": V,
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "v_feature_size": D,
            "v_target_size": 5,
            "v_hidden_size": 16,
            "v_num_hidden_layers": 1,
            "v_num_attention_heads": 2,
            "v_intermediate_size": 32,
            "bi_hidden_size": 16,
            "bi_num_attention_heads": 2,
            "bi_intermediate_size": 32,
            "v_biattention_id": [0],
            "t_biattention_id": [1],
            "hidden_dropout_prob": 0.0,
            "v_hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "losses": [],
            **settings,
        },
    )


def test_matching_loss_uses_berts_next_sentence_convention():
    logits = torch.tensor([[2.0, -1.0], [0.5, 1.5], [3.0, 3.0]])
    loss = matching_loss(logits, torch.tensor([1, 0, -1]))  # match, mismatch, unlabelled
    expected = (
        F.cross_entropy(logits[:1], torch.tensor([0]))
        + F.cross_entropy(logits[1:2], torch.tensor([1]))
    ) / 2
    torch.testing.assert_close(loss, expected)
    assert matching_loss(logits, torch.tensor([-1, -1, -1])) is None
    assert matching_loss(logits, None) is None


@pytest.mark.parametrize(
    "build, head_attribute", [(_visual_bert, "seq_relationship"), (_vilbert, "bi_seq_relationship")]
)
def test_pretraining_trains_the_models_own_matching_head(build, head_attribute):
    model = build("pretraining")
    batch = _mmf_batch()
    losses = model(batch)["losses"]
    assert "masked_aligned_vlp/train/itm_loss" in losses
    assert all(torch.isfinite(value).all() for value in losses.values())
    sum(value.sum() for value in losses.values()).backward()
    head = getattr(model.model.cls, head_attribute)
    assert head.weight.grad is not None and float(head.weight.grad.abs().sum()) > 0

    # rc10's losses only: no matching loss, and its head gets no gradient
    plain = build("pretraining", itm_loss_weight=0.0)
    losses = plain(_mmf_batch())["losses"]
    assert not any(key.endswith("itm_loss") for key in losses)
    sum(value.sum() for value in losses.values()).backward()
    assert getattr(plain.model.cls, head_attribute).weight.grad is None


@pytest.mark.parametrize("build", [_visual_bert, _vilbert])
def test_matching_loss_follows_the_labels_and_skips_unlabelled_batches(build):
    model = build("pretraining").eval()
    with torch.no_grad():
        first = model(_mmf_batch(is_correct=(1, 0, 1)))["losses"][
            "masked_aligned_vlp/train/itm_loss"
        ]
        flipped = model(_mmf_batch(is_correct=(0, 1, 0)))["losses"][
            "masked_aligned_vlp/train/itm_loss"
        ]
        unlabelled = model(_mmf_batch("val", is_correct=(-1, -1, -1)))["losses"]
    assert float(first) != pytest.approx(float(flipped))
    assert not any(key.endswith("itm_loss") for key in unlabelled)


@pytest.mark.parametrize(
    "build, key", [(_visual_bert, "visual_bert_uvlp"), (_vilbert, "vilbert_uvlp")]
)
def test_region_scorer_scores_each_real_region(build, key):
    model = build("region_scorer")
    batch = _region_batch()
    scores = model(batch)["scores"]
    assert scores.shape == (B, R)
    for row, count in enumerate(COUNTS):
        assert (scores[row, count:] == PADDED_REGION_SCORE).all()
        assert (scores[row, :count] > PADDED_REGION_SCORE).all()
    targets = torch.zeros(B, R)
    targets[0, 1] = 1
    F.binary_cross_entropy_with_logits(scores, targets).backward()
    assert float(model.model.classifier.scorer[0].weight.grad.abs().sum()) > 0
    encoder = next(p for name, p in model.model.bert.named_parameters() if "encoder" in name)
    assert encoder.grad is not None and float(encoder.grad.abs().sum()) > 0

    # MMF's optimizer grouping (encoder / classifier learning rates) covers every parameter
    config = OmegaConf.create(
        {
            "model": key,
            "optimizer": {"params": {"lr": 1e-4}},
            "model_config": {key: {"finetune_lr_multiplier": 1}},
        }
    )
    grouped = [p for group in model.get_optimizer_parameters(config) for p in group["params"]]
    assert {id(p) for p in grouped} == {id(p) for p in model.parameters()}


def test_vilbert_region_scores_read_the_image_stream():
    model = _vilbert("region_scorer").eval()
    batch = _region_batch()
    with torch.no_grad():
        before = model(batch)["scores"]
        batch.image_feature_0[1, 0] += 5.0  # sample 1's first region
        after = model(batch)["scores"]
    changed = (after - before).abs().sum(-1) > 1e-6
    assert changed.tolist() == [False, True, False]


# ------------------------------------------------------------------------------ VL-BERT
VL_HEADS = {
    "pretraining": ["mlm", "mrc"],
    "vqa": ["pooled_classifier"],
    "nlvr2": ["pair_classifier"],
    "refcoco": ["region_scorer"],
}


def _vl_bert(heads=("mlm", "mrc"), **settings) -> VLBERT:
    config = {
        "bert_model_name": None,
        "attention": "eager",
        "bert_config": {
            "vocab_size": V,
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
        },
        "feature_dim": D,
        "geometry_dim": 16,
        "num_region_classes": 5,
        "num_labels": 3,
        "heads": list(heads),
        "text_only_batches": True,
        "losses": [{"type": "uvla_mlm"}, {"type": "uvla_mrc"}],
        **settings,
    }
    torch.manual_seed(0)
    model = VLBERT(OmegaConf.create(config))
    model.build()
    model.init_losses()
    return model.eval()


def _vl_batch(masked_region=None, features=None) -> SampleList:
    """uvla's batch contract: sample 0 has 4 regions, sample 1 has 2; region_masked marks
    ``masked_region`` = (sample, region) with its class as the MRC target."""
    torch.manual_seed(1)
    features = torch.randn(2, R, D) if features is None else features
    region_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    region_masked = torch.zeros(2, R, dtype=torch.long)
    targets = torch.full((2, R), -1, dtype=torch.long)
    if masked_region is not None:
        region_masked[masked_region] = 1
        targets[masked_region] = 3
    boxes = torch.tensor([0.1, 0.2, 0.5, 0.6, 0.12]).expand(2, R, 5).clone()
    boxes[:, :, 0] += torch.arange(R) / 10
    batch = SampleList()
    batch.input_ids = torch.tensor([[1, 10, 11, 12, 2, 0], [1, 13, 2, 0, 0, 0]])
    batch.input_mask = (batch.input_ids != 0).long()
    batch.segment_ids = torch.zeros(2, L, dtype=torch.long)
    batch.lm_label_ids = torch.tensor([[-1, 10, -1, -1, -1, -1], [-1, -1, -1, -1, -1, -1]])
    batch.region_features = features * region_mask.unsqueeze(-1)
    batch.region_boxes = boxes
    batch.region_mask = region_mask
    batch.region_masked = region_masked
    batch.region_class_targets = targets
    batch.targets = torch.full((2,), -1)  # MMF computes losses only for batches with targets
    batch.dataset_name, batch.dataset_type = "aligned_vlp", "train"
    return batch


def test_vl_bert_pretraining_shapes_and_backward():
    model = _vl_bert().train()
    batch = _vl_batch(masked_region=(0, 1))
    output = model(batch)
    assert output["mlm_logits"].shape == (1, V)
    assert output["mrc_logits"].shape == (1, 5) and output["mrc_index"].tolist() == [[0, 1]]
    losses = output["losses"]
    assert set(losses) == {"train/aligned_vlp/uvla_mlm", "train/aligned_vlp/uvla_mrc"}
    sum(losses.values()).backward()
    embeddings = model.embeddings
    for parameter in (
        embeddings.visual_projection.weight,
        embeddings.special.weight,
        embeddings.text.token_type_embeddings.weight,
        model.encoder.layer[0].output.dense.weight,
    ):
        assert parameter.grad is not None and float(parameter.grad.abs().sum()) > 0


def test_vl_bert_trains_as_one_optimizer_group_in_mmf():
    """VL-BERT subclasses uvla without its region-path option: MMF's optimizer still builds."""
    from mmf.utils.build import build_optimizer

    model = _vl_bert()
    config = OmegaConf.create({"optimizer": {"type": "adam_w", "params": {"lr": 1e-4}}})
    (group,) = build_optimizer(model, config).param_groups
    assert group["lr"] == 1e-4 and len(group["params"]) == len(list(model.parameters()))


def test_vl_bert_text_only_batches_use_the_shared_visual_embedding():
    model = _vl_bert().train()
    batch = _vl_batch()
    for key in (
        "region_features",
        "region_boxes",
        "region_mask",
        "region_masked",
        "region_class_targets",
    ):
        del batch[key]
    output = model(batch)
    assert output["mlm_logits"].shape == (1, V) and "mrc_logits" not in output
    output["losses"]["train/aligned_vlp/uvla_mlm"].backward()
    assert float(model.embeddings.text_only_visual.grad.abs().sum()) > 0


@pytest.mark.parametrize("task, shape", [("vqa", (2, 3)), ("refcoco", (2, R)), ("nlvr2", (2, 3))])
def test_vl_bert_task_heads(task, shape):
    model = _vl_bert(VL_HEADS[task], losses=[]).train()
    batch = _vl_batch()
    if task == "nlvr2":  # two images per example
        for name in ("img0", "img1"):
            image = SampleList()
            image.region_features = batch.region_features + (name == "img1")
            image.region_boxes, image.region_mask = batch.region_boxes, batch.region_mask
            batch[name] = image
        for key in ("region_features", "region_masked", "region_class_targets"):
            del batch[key]
    scores = model(batch)["scores"]
    assert scores.shape == shape
    if task == "refcoco":
        assert (scores[1, 2:] == PADDED_REGION_SCORE).all()
    scores[scores > PADDED_REGION_SCORE].sum().backward()
    assert float(model.encoder.layer[0].output.dense.weight.grad.abs().sum()) > 0


def _encoded_outputs(model: VLBERT, batch: SampleList) -> torch.Tensor:
    """Every output the heads can read: text, regions, pooled and the MRC logits."""
    encoded = model.encode(batch)
    mrc = model(batch)["mrc_logits"]
    return torch.cat(
        [encoded.text.flatten(), encoded.regions.flatten(), encoded.pooled.flatten(), mrc.flatten()]
    )


def test_vl_bert_masked_region_reaches_no_element():
    """Changing a masked region's features changes nothing the model outputs, and its
    features get no gradient; an unmasked region's features do reach the text (the
    whole-image feature), so the check can fail."""
    model = _vl_bert()
    base = torch.randn(2, R, D)
    changed = base.clone()
    changed[0, 1] = 10 * torch.randn(D)
    with torch.no_grad():
        masked = [
            _encoded_outputs(model, _vl_batch((0, 1), features)) for features in (base, changed)
        ]
        visible = [
            _encoded_outputs(model, _vl_batch((0, 2), features)) for features in (base, changed)
        ]
    assert torch.equal(masked[0], masked[1])
    assert not torch.allclose(visible[0], visible[1])

    features = base.clone().requires_grad_(True)
    _encoded_outputs(model, _vl_batch((0, 1), features)).pow(2).sum().backward()
    grad = features.grad
    assert float(grad[0, 1].abs().max()) == 0.0
    assert float(grad[0, 0].abs().max()) > 0 and float(grad[0, 2].abs().max()) > 0


def test_vl_bert_whole_image_feature_of_the_text_leaves_masked_regions_out():
    """The text elements' embedding is the same whether a masked region exists or not."""
    model = _vl_bert()
    embeddings = model.embeddings
    batch = _vl_batch((0, 1))
    args = (batch.input_ids, batch.input_mask, batch.segment_ids)
    with torch.no_grad():
        embeddings.text_visual_norm.weight.fill_(1.0)  # as after training: text sees the image
        with_masked = embeddings(
            *args, batch.region_features, batch.region_boxes, batch.region_mask, batch.region_masked
        )
        dropped = batch.region_mask.clone()
        dropped[0, 1] = 0  # the masked region removed from the image altogether
        without = embeddings(
            *args, batch.region_features, batch.region_boxes, dropped, torch.zeros_like(dropped)
        )
    torch.testing.assert_close(with_masked[:, :L], without[:, :L])
    torch.testing.assert_close(with_masked[:, -1], without[:, -1])  # [END]


def test_vl_bert_layout_regions_share_a_position_segment_c():
    model = _vl_bert()
    embeddings = model.embeddings
    batch = _vl_batch()
    same = torch.randn(D).expand(2, R, D).clone()
    with torch.no_grad():
        elements = embeddings(
            batch.input_ids,
            batch.input_mask,
            batch.segment_ids,
            same,
            batch.region_boxes[:, :1].expand(2, R, 5),
            batch.region_mask,
            batch.region_masked,
        )
    assert elements.shape == (2, L + R + 1, 16)
    regions = elements[0, L : L + R]
    assert all(torch.allclose(regions[0], regions[k]) for k in range(1, R))  # no order
    assert not torch.allclose(elements[0, 1], elements[0, 2])  # text positions differ
    table = embeddings.text.token_type_embeddings.weight
    assert table.shape[0] == IMAGE_SEGMENT + 1  # A, B and the image's C


def test_vl_bert_keeps_the_berts_segments_and_starts_text_visual_at_zero():
    plain = _vl_bert()
    assert float(plain.embeddings.text_visual_norm.weight.abs().max()) == 0.0
    model = VLBERT(
        OmegaConf.create(
            {
                "bert_model_name": BERT,
                "bert_layers": 1,
                "feature_dim": D,
                "geometry_dim": 16,
                "heads": ["mlm"],
                "losses": [],
            }
        )
    )
    model.build()
    reference = load_file(str(Path(BERT) / "model.safetensors"))
    torch.testing.assert_close(
        model.embeddings.text.token_type_embeddings.weight[:2],
        reference["embeddings.token_type_embeddings.weight"],
    )


def test_sinusoidal_geometry():
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4]])
    embedded = sinusoidal_geometry(boxes, 16)
    assert embedded.shape == (2, 16)
    assert not torch.allclose(embedded[0], embedded[1])
    with pytest.raises(ValueError, match="multiple of 8"):
        sinusoidal_geometry(boxes, 12)


def test_vl_bert_config_errors_name_their_key():
    with pytest.raises(UserConfigError, match="model_config.vl_bert.heads: unknown \\['itm'\\]"):
        _vl_bert(("mlm", "itm"))
    with pytest.raises(UserConfigError, match="model_config.vl_bert.geometry_dim must be set"):
        _vl_bert(geometry_dim=None)
    with pytest.raises(UserConfigError, match="geometry_dim must be a multiple of 8 .*got 12"):
        _vl_bert(geometry_dim=12)
    bert = dict(_vl_bert().config.bert_config, type_vocab_size=3)
    with pytest.raises(
        UserConfigError, match="2 token types \\(A, B\\); the configured BERT has 3"
    ):
        _vl_bert(bert_config=bert)


# --------------------------------------------------------------- masked_aligned_vlp data
def _masked_dataset(world: Path, dataset_type: str, **changes):
    config = load_yaml(MaskedAlignedVLPBuilder.config_path()).dataset_config.masked_aligned_vlp
    config.merge_with(
        {
            "data_dir": str(world),
            "max_features": 24,
            "holdout_every": 6,
            "use_image_feature_masks": True,
            **changes,
        }
    )
    config.processors.masked_token_processor.params.max_seq_length = 24
    return build_dataset("masked_aligned_vlp", config, dataset_type).datasets[0]


def test_masked_aligned_vlp_is_mmfs_masked_data_over_the_aligned_pool(tiny_world):
    random.seed(0)
    train = _masked_dataset(tiny_world, "train")
    pool = ImagePoolDatabase(
        str(tiny_world / "detections/cc/predictions.tsv"),
        "train",
        6,
        str(tiny_world / "text/captions_gt.tsv"),
    )
    assert [item["image_id"] for item in train.annotation_db] == [item["image_id"] for item in pool]
    assert [item["captions"] for item in train.annotation_db] == [
        [item["caption"]] for item in pool
    ]

    samples = [train[i] for i in range(len(train))]
    labels = {int(sample.is_correct) for sample in samples}
    assert labels == {0, 1}  # false captions (ITM negatives) and true ones
    first = samples[0]
    assert first.input_ids.shape == first.lm_label_ids.shape == (24,)
    assert any(bool((sample.lm_label_ids != -1).any()) for sample in samples)  # masked words
    assert first.image_feature_0.shape == (24, 64) and len(first.image_labels) == 24
    assert {label for sample in samples for label in sample.image_labels} == {-1, 1}
    assert set(first.image_info_0) >= {"bbox", "cls_prob", "max_features"}

    val = _masked_dataset(tiny_world, "val")
    assert len(val) == len(
        ImagePoolDatabase(str(tiny_world / "detections/cc/predictions.tsv"), "val", 6)
    )
    assert {int(val[i].is_correct) for i in range(len(val))} == {-1}


def test_masked_aligned_vlp_errors(tiny_world):
    with pytest.raises(ValueError, match="captions must be set"):
        _masked_dataset(tiny_world, "train", captions=None)
    with pytest.raises(ValueError, match="holdout_every"):
        _masked_dataset(tiny_world, "val", holdout_every=1000)  # one held-out image


# ------------------------------------------------------------- configs as MMF composes them
def _compose(config: str):
    """MMF's full configuration of ``config`` (relative to the repository), as ``mmf_run``."""
    previous = registry.get("config", no_warning=True)
    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    try:
        args = argparse.Namespace(config_override=None, opts=[f"config={REPO / config}"])
        return Configuration(args).get_config()
    finally:
        registry.register("config", previous)


BUDGET = ("batch_size", "max_updates", "seed", "lr_scheduler", "num_workers")


@pytest.fixture(scope="module")
def uvla_runs():
    runs = {"pretrain": _compose("projects/uvla/pretrain.yaml")}
    runs.update({task: _compose(f"projects/uvla/finetune/{task}.yaml") for task in TASKS})
    return runs


def _configs():
    for key in REFERENCE_MODELS:
        yield key, "pretrain", SYSTEMS[key].pretrain_config
        for task in TASKS:
            yield key, task, SYSTEMS[key].finetune(task)


@pytest.mark.parametrize("system, kind, config", list(_configs()))
def test_every_seed_config_has_uvlas_optimizer_schedule_and_budget(system, kind, config, uvla_runs):
    loaded, reference = _compose(config), uvla_runs[kind]
    assert loaded.scheduler.type == "warmup_linear" and loaded.training.lr_scheduler is True
    assert loaded.scheduler.params.num_training_steps == loaded.training.max_updates
    for key in ("optimizer", "scheduler"):
        assert OmegaConf.to_container(loaded[key], resolve=True) == OmegaConf.to_container(
            reference[key], resolve=True
        ), key
    for key in BUDGET:
        assert loaded.training[key] == reference.training[key], key
    assert loaded.env.data_dir == reference.env.data_dir
    node = loaded.model_config[loaded.model]
    layers = {
        "visual_bert": "num_hidden_layers",
        "vilbert": "num_hidden_layers",
        "vl_bert": "bert_layers",
    }[system]
    assert node[layers] == 2  # MiniLM's first 2 layers, as uvla's demo
    assert node.bert_model_name == reference.model_config.uvla.bert_model_name


def test_mmf_variants_read_mmfs_own_model_settings():
    visual_bert = _compose("projects/baselines/visual_bert/refcoco_plus.yaml")
    assert visual_bert.model == "visual_bert_uvlp"
    assert visual_bert.model_config.visual_bert_uvlp.training_head_type == "region_scorer"
    assert visual_bert.model_config.visual_bert_uvlp.visual_embedding_dim == 128
    vilbert = _compose("projects/baselines/vilbert/pretrain.yaml")
    assert vilbert.model_config.vilbert_uvlp.v_target_size == 185
    assert vilbert.model_config.vilbert_uvlp.itm_loss_weight == 1.0
    assert vilbert.dataset_config.masked_aligned_vlp.use_image_feature_masks is True


def test_reference_systems_name_existing_configs_and_their_weight_options(tmp_path):
    for system in SYSTEMS.values():
        assert (REPO / system.pretrain_config).is_file(), system.pretrain_config
        for task in TASKS:
            assert (REPO / system.finetune(task)).is_file(), system.finetune(task)
    weights = tmp_path / "w.pth"
    assert SYSTEMS["vilbert"].start_from(weights) == [
        f"checkpoint.resume_file={weights}",
        "checkpoint.resume_pretrained=True",
    ]
    assert SYSTEMS["vilbert"].start_from(None) == []
    assert SYSTEMS["vl_bert"].start_from(None) == [
        "model_config.vl_bert.pretrained_checkpoint=None"
    ]
    assert (
        SYSTEMS["vl_bert"].evaluate_from(weights)[-1]
        == "model_config.vl_bert.pretrained_checkpoint=None"
    )
    with pytest.raises(ValueError, match="unknown task"):
        SYSTEMS["vl_bert"].finetune("vcr")
