"""The μ-VLA model: heads by batch content, SDPA = eager, curriculum, MiniLM, task heads."""

import argparse
import os
from unittest import mock

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch.utils.data.dataloader import default_collate

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.sample import SampleList
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.models.uvla import UVLA
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor
from mmf_uvlp.processors.region_phrase_masking import RegionPhraseMaskingProcessor
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor
from mmf_uvlp.trainers.progress import clear_train_samples, register_train_samples

BERT = os.environ["UVLP_BERT"]
D, L, R, CLASSES = 6, 16, 5, 7
PRETRAINING_LOSSES = ["uvla_mlm", "uvla_mrc", "uvla_mrfr", "uvla_pmrtc", "uvla_itm"]
SENTENCE = "a red sofa near the white wall"
PHRASES = [
    {"char_span": [0, 10], "region": 0, "link_score": 0.8},
    {"char_span": [16, 30], "region": 2, "link_score": 0.5},
]


@pytest.fixture(autouse=True)
def registry_state(mmf_registry):
    """A minimal MMF config in the registry (Losses reads it); as it was again after the test."""
    registry.register(
        "config",
        OmegaConf.create({"evaluation": {"predict": False}, "training": {"batch_size": 4}}),
    )
    clear_train_samples()
    register_train_samples("toy", 8)  # batch 4: one epoch = 2 updates
    registry.register("num_updates", 0)


def _config(**overrides):
    config = {
        "bert_model_name": None,
        "bert_config": {
            "vocab_size": 30522,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
        },
        "attention": "sdpa",
        "feature_dim": D,
        "num_region_classes": CLASSES,
        "heads": ["mlm", "mrc", "mrfr", "pmrtc", "itm"],
        "curriculum": {"enabled": True, "start_epoch": 1},
        "losses": [{"type": name} for name in PRETRAINING_LOSSES],
    }
    config.update(overrides)
    return OmegaConf.create(config)


def _model(**overrides) -> UVLA:
    torch.manual_seed(0)
    model = UVLA(_config(**overrides))
    model.build()
    model.init_losses()
    return model


def _image(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    x1 = torch.rand(n, generator=g) * 40
    return {
        "features": torch.rand(n, D, generator=g),
        "image_width": 100,
        "image_height": 100,
        "boxes": torch.stack([x1, x1, x1 + 30, x1 + 50], dim=1),
    }


@pytest.fixture(scope="module")
def processors():
    params = {
        "tokenizer_path": BERT,
        "max_seq_length": L,
        "max_regions": R,
        "max_phrase_tokens": 4,
        "mask_prob": 0.4,
    }
    return {
        "rt": RegionTagMaskingProcessor(params),
        "rn": RegionPhraseMaskingProcessor(params),
        "is": ImageSentenceMaskingProcessor(params),
    }


def _batch(processors, kind: str, size: int = 3) -> SampleList:
    g = torch.Generator().manual_seed(11)
    items = []
    for i in range(size):
        image = _image(3 + i % 2, seed=i)
        if kind == "rt":
            raw = dict(
                image,
                region_labels=["dog", "tennis racket", "man", "wall"][: 3 + i % 2],
                region_classes=[1, 2, 3, 4][: 3 + i % 2],
            )
        elif kind == "rn":
            raw = dict(image, sentence=SENTENCE, noun_phrases=PHRASES)
        else:
            raw = dict(image, sentence=SENTENCE, itm_label=i % 2)
        items.append(processors[kind](raw, g))
    batch = SampleList(default_collate(items))
    batch.dataset_name, batch.dataset_type = "toy", "train"
    return batch


@pytest.mark.parametrize("kind", ["rt", "rn", "is"])
def test_forward_backward_on_each_pretraining_batch(processors, kind):
    model = _model()
    batch = _batch(processors, kind)
    output = model(batch)
    losses = output["losses"]
    assert sorted(losses) == sorted(f"train/toy/{name}" for name in PRETRAINING_LOSSES)
    total = sum(loss.sum() for loss in losses.values())
    assert torch.isfinite(total)
    total.backward()
    assert model.embeddings.feature_projection.weight.grad is not None
    assert model.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    if kind == "rt":
        assert losses["train/toy/uvla_mrc"].item() > 0 and losses["train/toy/uvla_mrfr"].item() > 0
        assert model.heads["mrfr"].regressor[0].weight.grad.abs().sum() > 0
    if kind == "is":
        assert losses["train/toy/uvla_itm"].item() > 0


def test_heads_follow_the_targets_in_the_batch(processors):
    model = _model()
    rt, rn, is_ = (_batch(processors, k) for k in ("rt", "rn", "is"))
    out = model(rt)
    assert torch.equal(out["mrfr_index"], (rt.region_masked * rt.region_mask).nonzero())
    assert torch.equal(out["mlm_index"], (rt.lm_label_ids != -1).nonzero())
    assert "mrfr_features" not in model(rn) and "mrfr_features" not in model(is_)  # MRFR: R-T only
    out = model(rn)
    assert torch.equal(out["pmrtc_index"], rn.region_masked.nonzero())
    assert out["itm_logits"].shape == (3, 2)


def test_sdpa_equals_eager_and_attention_maps_on_request(processors):
    batch = _batch(processors, "is")
    sdpa = _model().eval()
    eager = _model(attention="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    assert type(sdpa.encoder.layer[0].attention.self).__name__ == "BertSdpaSelfAttention"
    sdpa_kernel = torch.nn.functional.scaled_dot_product_attention
    with (
        torch.no_grad(),
        mock.patch(
            "torch.nn.functional.scaled_dot_product_attention", wraps=sdpa_kernel
        ) as fused_calls,
    ):
        fused = sdpa.encode(batch)
        assert fused_calls.call_count == 2  # one fused call per layer
        reference = eager.encode(batch)
        assert fused_calls.call_count == 2
        with_maps = sdpa.encode(batch, output_attentions=True)  # falls back to eager
        assert fused_calls.call_count == 2
    assert fused.attentions is None
    assert torch.allclose(fused.text, reference.text, atol=1e-5)
    assert torch.allclose(fused.regions, reference.regions, atol=1e-5)
    assert torch.allclose(fused.pooled, with_maps.pooled, atol=1e-5)
    maps = with_maps.attentions
    assert len(maps) == 2 and maps[0].shape == (3, 4, L + R, L + R)
    assert torch.allclose(maps[0].sum(-1), torch.ones(3, 4, L + R), atol=1e-5)
    keys = torch.cat([batch.input_mask, batch.region_mask], dim=1)  # (B, L+R)
    assert maps[-1].masked_select(keys[:, None, None, :] == 0).abs().max() == 0  # padding ignored
    flagged = _model(output_attentions=True).eval()
    with torch.no_grad():
        assert len(flagged(batch)["attentions"]) == 2


def test_tag_tokens_use_their_box_not_a_position():
    model = _model().eval()
    ids = torch.tensor([[101, 3899, 3899, 102]])
    boxes = torch.zeros(1, 4, 5)
    boxes[0, 1:3] = torch.tensor([0.1, 0.2, 0.5, 0.6, 0.16])
    with torch.no_grad():
        is_tag = torch.tensor([[0, 1, 1, 0]])
        as_tags = model.embeddings.embed_text(ids, torch.zeros_like(ids), boxes, is_tag)
        as_text = model.embeddings.embed_text(ids, torch.zeros_like(ids))
    assert torch.allclose(as_tags[0, 1], as_tags[0, 2])  # same tag and box, different index
    assert not torch.allclose(as_text[0, 1], as_text[0, 2])
    assert torch.allclose(as_tags[0, 0], as_text[0, 0])  # [CLS] keeps its position


def _clean(batch: SampleList) -> SampleList:
    """The batch with its uncorrupted pairs as the model's input."""
    clean = SampleList(dict(batch.items()))
    clean.input_ids, clean.region_features = batch.clean_input_ids, batch.clean_region_features
    return clean


def test_curriculum_weights_in_the_model_switch_at_epoch_m(processors):
    model = _model().eval()
    batch = _batch(processors, "is")
    batch.curriculum_weighted = torch.tensor([True, False, True])
    registry.register("num_updates", 1)  # epoch 0.5
    with torch.no_grad():
        assert model(batch)["curriculum_weights"].tolist() == [1.0, 1.0, 1.0]
        registry.register("num_updates", 2)  # epoch 1 = m
        out = model(batch)
        clean = model(_clean(batch))
    match = torch.softmax(clean["itm_logits"], -1)[:, 1]
    expected = [match[0].item(), 1.0, match[2].item()]
    assert out["curriculum_weights"].tolist() == pytest.approx(expected)
    assert not out["curriculum_weights"].requires_grad


@pytest.mark.parametrize("kind", ["rn", "is"])
def test_the_curriculum_weight_is_the_clean_pair_s_match_score(processors, kind):
    """w_ITM scores the retrieved pair, not its masked copy (an R-N input without its linked
    phrases or regions); it is read in eval mode even while training, so dropout neither
    blurs it nor draws from the RNG."""
    model = _model()
    with torch.no_grad():  # a head that tells pairs apart (a fresh one says ~0.5 to all)
        model.heads["itm"].classifier.weight.normal_(
            0.0, 1.0, generator=torch.Generator().manual_seed(3)
        )
    batch = _batch(processors, kind)
    assert not torch.equal(batch.input_ids, batch.clean_input_ids) or not torch.equal(
        batch.region_features, batch.clean_region_features
    )
    registry.register("num_updates", 2)  # epoch 1 = m
    model.eval()
    with torch.no_grad():
        masked = torch.softmax(model(batch)["itm_logits"], -1)[:, 1]
        clean = torch.softmax(model(_clean(batch))["itm_logits"], -1)[:, 1]
    assert (masked - clean).abs().max() > 1e-5  # float32 agrees to ~1e-7
    model.train()
    state = torch.get_rng_state()
    weights = model(batch)["curriculum_weights"]
    assert model.training
    assert weights.tolist() == pytest.approx(clean.tolist(), abs=1e-6)
    assert weights.tolist() != pytest.approx(masked.tolist(), abs=1e-6)
    torch.set_rng_state(state)
    model(batch)
    with_weight = torch.get_rng_state()
    curriculum, model.curriculum = model.curriculum, None
    torch.set_rng_state(state)
    model(batch)  # the same pass without the weight's: the RNG ends in the same state
    model.curriculum = curriculum
    assert torch.equal(with_weight, torch.get_rng_state())


def test_a_weighted_batch_without_its_clean_pair_is_refused(processors):
    model = _model().eval()
    batch = _batch(processors, "is")
    del batch["clean_region_features"]
    registry.register("num_updates", 2)
    with pytest.raises(
        ValueError,
        match=r"curriculum-weighted batch needs "
        r"\['clean_region_features'\]",
    ):
        model(batch)


def test_minilm_weights_are_loaded():
    model = _model(bert_model_name=BERT, feature_dim=D).eval()
    weights = load_file(os.path.join(BERT, "model.safetensors"))
    prefix = "" if "embeddings.word_embeddings.weight" in weights else "bert."
    words = model.embeddings.text.word_embeddings.weight
    assert torch.equal(words, weights[prefix + "embeddings.word_embeddings.weight"])
    key = prefix + "encoder.layer.5.attention.self.query.weight"
    assert torch.equal(model.encoder.layer[5].attention.self.query.weight, weights[key])
    assert model.heads["mlm"].vocab_head.decoder.weight is words  # tied
    assert model.heads["pmrtc"].vocab_head is model.heads["mlm"].vocab_head


def _mmf_batch(size: int = 2, regions: int = 4) -> dict:
    """Fields as MMF's vqa2 / visual_entailment datasets produce them."""
    counts = [3, 4][:size]
    return {
        "input_ids": torch.tensor([[101, 2054, 2003, 102, 0]] * size),
        "input_mask": torch.tensor([[1, 1, 1, 1, 0]] * size),
        "segment_ids": torch.zeros(size, 5, dtype=torch.long),
        "image_feature_0": torch.rand(size, regions, D),
        "image_info_0": SampleList(
            {
                "max_features": torch.tensor(counts),
                "bbox": [
                    torch.rand(n, 2).repeat(1, 2).numpy() * 50 + [0, 0, 10, 10] for n in counts
                ],
                "image_width": [100] * size,
                "image_height": [80] * size,
            }
        ),
    }


def test_task_heads_on_mmf_dataset_fields():
    no_curriculum = {"losses": [], "curriculum": {"enabled": False}}
    vqa = _model(heads=["pooled_classifier"], num_labels=9, **no_curriculum)
    fields = _mmf_batch()
    assert vqa(SampleList(fields))["scores"].shape == (2, 9)

    nlvr2 = _model(heads=["pair_classifier"], num_labels=2, **no_curriculum)
    first, second = _mmf_batch(), _mmf_batch()
    pairs = {k: first[k] for k in ("input_ids", "input_mask", "segment_ids")}
    pairs["img0"] = SampleList({k: first[k] for k in ("image_feature_0", "image_info_0")})
    pairs["img1"] = SampleList({k: second[k] for k in ("image_feature_0", "image_info_0")})
    assert nlvr2(SampleList(pairs))["scores"].shape == (2, 2)

    refer = _model(heads=["region_scorer"], **no_curriculum).eval()
    scores = refer(SampleList(_mmf_batch()))["scores"]
    assert scores.shape == (2, 4) and scores[0, 3].item() == -1e4 and scores[1, 3].item() > -1e4


def test_mmf_s_pixel_boxes_are_normalised_per_batch_as_by_hand():
    model = _model(
        losses=[], curriculum={"enabled": False}, heads=["pooled_classifier"], num_labels=3
    )
    fields = _mmf_batch()
    fields["image_info_0"]["bbox"][1][0] = [-3.0, 5.0, 130.0, 40.0]  # a pixel outside: clamped
    inputs = model._inputs(SampleList(fields))
    info = fields["image_info_0"]
    for image, pixels in enumerate(info["bbox"]):
        width, height = info["image_width"][image], info["image_height"][image]
        for row in range(4):
            if row >= len(pixels):
                assert inputs.region_boxes[image, row].tolist() == [0.0] * 5
                continue
            x1, y1, x2, y2 = (
                min(max(float(value) / size, 0.0), 1.0)
                for value, size in zip(pixels[row], (width, height, width, height))
            )
            expected = [x1, y1, x2, y2, max(x2 - x1, 0.0) * max(y2 - y1, 0.0)]
            assert inputs.region_boxes[image, row].tolist() == pytest.approx(expected, abs=1e-6)
    assert inputs.region_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    given = dict(fields, region_boxes=torch.rand(2, 4, 5), region_mask=torch.ones(2, 4).long())
    inputs = model._inputs(SampleList(given))  # a dataset's own boxes (RefCOCO+'s) are used
    assert torch.equal(inputs.region_boxes, given["region_boxes"])
    bad = _mmf_batch()
    bad["image_info_0"]["image_width"] = [100, 0]
    with pytest.raises(ValueError, match="width and height must be positive"):
        model._inputs(SampleList(bad))


def test_mean_pooling_reads_the_mean_of_the_unpadded_tokens():
    no_curriculum = {
        "losses": [],
        "curriculum": {"enabled": False},
        "heads": ["pooled_classifier"],
        "num_labels": 3,
    }
    model = _model(pooling="mean", **no_curriculum).eval()
    raw = _mmf_batch()
    fields = SampleList(raw)
    encoded = model.encode(fields)
    sequence = torch.cat([encoded.text, encoded.regions], dim=1)  # (2, 5 + 4, H)
    real = torch.cat([fields["input_mask"], encoded.region_mask], dim=1).bool()  # words, regions
    for i in range(2):
        mean = sequence[i][real[i]].mean(0)
        assert torch.allclose(encoded.pooled[i], model.pooler(mean.view(1, 1, -1))[0], atol=1e-6)
    assert not torch.allclose(encoded.pooled, model.pooler(sequence), atol=1e-3)  # not [CLS]
    padded = SampleList(
        dict(raw, image_feature_0=torch.cat([raw["image_feature_0"], torch.rand(2, 2, D)], dim=1))
    )  # 2 more padding regions
    assert torch.allclose(model.encode(padded).pooled, encoded.pooled, atol=1e-6)
    with pytest.raises(ValueError, match="pooling must be one of"):
        _model(pooling="max", **no_curriculum)


def test_clear_errors_for_bad_configs_and_batches(processors):
    with pytest.raises(ValueError, match="heads"):
        _model(heads=["mlm", "vqa"])
    with pytest.raises(ValueError, match="num_region_classes"):
        _model(num_region_classes=None)
    with pytest.raises(ValueError, match="itm"):
        _model(heads=["mlm"])
    with pytest.raises(ValueError, match="bert_config"):
        _model(bert_config=None)
    model = _model()
    fields = _mmf_batch()
    del fields["image_info_0"]
    with pytest.raises(ValueError, match="image_info_0"):
        model(SampleList(fields))
    with pytest.raises(ValueError, match="feature_dim"):
        model(SampleList(dict(_mmf_batch(), image_feature_0=torch.rand(2, 4, D + 1))))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"feature_dim": "64"},
            r"model_config.uvla.feature_dim must be a whole number >= 1, got '64'",
        ),
        (
            {"visual_token_type": 2},
            r"model_config.uvla.visual_token_type must be a whole number in \[0, 1\]",
        ),
        ({"curriculum": {"start_epoch": -1}}, r"model_config.uvla.curriculum.start_epoch must be"),
        ({"curriculum": {"start_epoch": "one"}}, r"curriculum.start_epoch .* got 'one'"),
        ({"heads": ["mlm", "vqa"]}, r"model_config.uvla.heads"),
    ],
)
def test_bad_model_config_values_are_user_config_errors(overrides, message):
    """Each ends mmf_run in its one line (mmf_uvlp.training.cli_errors), naming its key."""
    with pytest.raises(UserConfigError, match=message):
        _model(**overrides)


def test_a_bad_loss_param_is_a_user_config_error():
    with pytest.raises(UserConfigError, match=r"uvla_mrfr: params.feature_reduction must be one"):
        registry.get_loss_class("uvla_mrfr")(feature_reduction="max")


def test_visual_lr_multiplier_gives_the_region_path_its_own_lr_in_mmf_s_optimizer():
    from mmf.utils.build import build_optimizer

    config = OmegaConf.create({"optimizer": {"type": "adam_w", "params": {"lr": 1e-4}}})
    plain = build_optimizer(_model(), config)
    assert [group["lr"] for group in plain.param_groups] == [1e-4]
    model = _model(visual_lr_multiplier=10)
    optimizer = build_optimizer(model, config)
    rest, visual = optimizer.param_groups
    assert (rest["lr"], visual["lr"]) == (1e-4, pytest.approx(1e-3))
    assert {id(p) for p in visual["params"]} == {id(p) for p in model.visual_parameters()}
    assert {id(p) for p in model.embeddings.feature_projection.parameters()} <= {
        id(p) for p in visual["params"]
    }
    assert len(rest["params"]) + len(visual["params"]) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="visual_lr_multiplier"):
        _model(visual_lr_multiplier=0)


def test_mmf_configuration_loads_the_model_defaults():
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    args = argparse.Namespace(config_override=None, opts=["model=uvla", "dataset=vqa2"])
    config = Configuration(args)
    uvla = config.get_config().model_config.uvla
    assert (
        uvla.heads is None and uvla.losses is None
    )  # the task's (tests/models/test_benchmark_configs.py)
    assert list(uvla.tasks.pretraining.heads) == ["mlm", "mrc", "mrfr", "pmrtc", "itm"]
    assert uvla.bert_model_name == BERT and uvla.curriculum.start_epoch == 1
    assert [loss.type for loss in uvla.tasks.pretraining.losses] == PRETRAINING_LOSSES
