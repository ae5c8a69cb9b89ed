"""The baselines' pre-training data (Aligned VLP, random / partly true pairs, U-VisualBERT)
on a hand-made pool of 10 images, their processors, and uvla's text-only batches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data.dataloader import default_collate

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.sample import SampleList
from mmf.datasets.multi_dataset_loader import MultiDatasetLoader
from mmf.utils.build import build_dataset
from mmf_uvlp.datasets.builders.random_pairs.pairing import choose_true_pairs, draw_partners
from mmf_uvlp.datasets.databases.image_pool import ImagePoolDatabase
from mmf_uvlp.datasets.databases.text_corpus import TextCorpusDatabase
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.models.uvla import UVLA
from mmf_uvlp.processors.image_masking import ImageMaskingProcessor
from mmf_uvlp.processors.image_tag_masking import ImageTagMaskingProcessor
from mmf_uvlp.processors.pair_masking import PairMaskingProcessor
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor
from mmf_uvlp.processors.text_masking import TextMaskingProcessor

TOKENIZER = os.environ["UVLP_BERT"]
N, D, L, R = 10, 4, 16, 4
LABELS = ["dog", "red car", "man"]
CLASSES = [3, 5, 7]
EXTRA_SENTENCES = [f"and the story goes on, part {i}" for i in range(20)]
PARAMS = {"tokenizer_path": TOKENIZER, "max_seq_length": L, "max_regions": R}
DATASETS = ("aligned_vlp", "random_pairs", "u_visualbert_text", "u_visualbert_image")


def _caption(k: int) -> str:
    """Image k's caption; images 8 and 9 share theirs (a duplicate caption)."""
    return f"caption of image {min(k, 8)}"


def _regions(k: int) -> int:
    return 2 + k % 2


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    """img0..img9: detections.jsonl, an MMF .npy feature folder (region r of image k has
    features k + r / 10), captions_gt.tsv, and two text files."""
    root = tmp_path_factory.mktemp("pool")
    (root / "features").mkdir()
    (root / "text").mkdir()
    lines, captions = [], []
    for k in range(N):
        n = _regions(k)
        boxes = [[10.0 * r, 0.0, 10.0 * r + 20, 30.0] for r in range(n)]
        lines.append(
            json.dumps(
                {
                    "image_id": f"img{k}",
                    "image_h": 40,
                    "image_w": 60,
                    "objects": [
                        {"rect": boxes[r], "class": LABELS[r], "conf": 0.9} for r in range(n)
                    ],
                }
            )
        )
        features = np.array([[k + r / 10] * D for r in range(n)], dtype=np.float32)
        np.save(root / "features" / f"img{k}.npy", features)
        info = {
            "bbox": np.array(boxes, dtype=np.float32),
            "num_boxes": n,
            "image_width": 60,
            "image_height": 40,
            "objects": np.array(CLASSES[:n], dtype=np.int64),
        }
        np.save(root / "features" / f"img{k}_info.npy", info, allow_pickle=True)
        captions.append(f"img{k}\t{_caption(k)}")
    (root / "detections.jsonl").write_text("\n".join(lines) + "\n")
    (root / "text" / "captions_gt.tsv").write_text("\n".join(captions) + "\n")
    # The caption corpus holds every own caption: random partners must avoid them.
    (root / "text" / "captions.txt").write_text("\n".join(_caption(k) for k in range(N)) + "\n")
    (root / "text" / "other.txt").write_text("\n".join(EXTRA_SENTENCES) + "\n\n")
    return root


@pytest.fixture(autouse=True)
def registry_state():
    """A minimal global config for MMF's loaders; MMF reuses a processor registered under
    ``<dataset>_masking_processor``, so each test starts without them."""
    missing = object()
    saved = {
        key: registry.get(key, missing, no_warning=True) for key in ("config", "current_device")
    }
    registry.register(
        "config",
        OmegaConf.create(
            {
                "evaluation": {"predict": False},
                "training": {
                    "batch_size": 2,
                    "num_workers": 0,
                    "pin_memory": False,
                    "dataset_size_proportional_sampling": True,
                },
            }
        ),
    )
    registry.register("current_device", torch.device("cpu"))
    yield
    for key, value in saved.items():
        if value is missing:  # not registered before: leave no None behind
            registry.unregister(key)
        else:
            registry.register(key, value)
    for name in DATASETS:
        registry.unregister(f"{name}_masking_processor")


def _config(pool: Path, name: str, **changes) -> OmegaConf:
    processors = {
        "aligned_vlp": "uvla_pair_masking",
        "random_pairs": "uvla_pair_masking",
        "u_visualbert_text": "uvla_text_masking",
        "u_visualbert_image": "uvla_image_tag_masking",
    }
    text = name == "u_visualbert_text"
    annotations = "text/captions.txt,text/other.txt" if text else "detections.jsonl"
    config = {
        "data_dir": str(pool),
        "use_features": not text,
        "use_images": False,
        "return_features_info": True,
        "max_features": R,
        "fast_read": False,
        "holdout_every": 0,
        "annotations": {t: [annotations] for t in ("train", "val", "test")},
        "features": {t: ["features"] for t in ("train", "val", "test")},
        "captions": "text/captions_gt.tsv",
        "sentences": ["text/captions.txt", "text/other.txt"],
        "pairing_seed": 0,
        "processors": {"masking_processor": {"type": processors[name], "params": dict(PARAMS)}},
    }
    config.update(changes)
    return OmegaConf.create(config)


def _dataset(pool: Path, name: str, dataset_type: str = "train", **changes):
    """The builder's dataset (MMF wraps it in a concat dataset of one)."""
    return build_dataset(name, _config(pool, name, **changes), dataset_type).datasets[0]


def _image_number(raw_or_sample_features: torch.Tensor) -> int:
    return int(round(float(raw_or_sample_features[0, 0])))


# ------------------------------------------------------------------------------ processors
def _image(n: int = 3) -> dict:
    return {
        "features": torch.arange(n * D, dtype=torch.float).view(n, D) + 1,
        "boxes": torch.tensor([[0.0, 0, 10, 10], [5, 5, 20, 20], [1, 1, 30, 30]])[:n],
        "image_width": 40,
        "image_height": 40,
        "region_classes": CLASSES[:n],
        "region_labels": LABELS[:n],
    }


def test_pair_masking_masks_every_pair_and_gives_negatives_no_reconstruction_target():
    processor = PairMaskingProcessor(
        dict(PARAMS, mask_prob=1.0, mask_token_prob=1.0, random_token_prob=0.0, zero_prob=1.0)
    )
    image = _image()
    true_pair = processor(dict(image, sentence="a dog and a man", itm_label=1))
    length = int(true_pair["input_mask"].sum())
    words = processor.tokenizer("a dog and a man")["input_ids"]
    assert true_pair["lm_label_ids"][1 : length - 1].tolist() == words[1:-1]  # every word-piece
    assert (true_pair["input_ids"][1 : length - 1] == processor.tokenizer.mask_token_id).all()
    assert true_pair["region_masked"].tolist() == [1, 1, 1, 0]
    assert true_pair["region_class_targets"].tolist() == CLASSES + [-1]
    assert torch.equal(true_pair["region_features_target"][:3], image["features"])  # originals
    assert true_pair["itm_label"].item() == 1 == true_pair["targets"].item()

    negative = processor(dict(image, sentence="a dog and a man", itm_label=0))
    assert (negative["lm_label_ids"] == -1).all() and not negative["region_masked"].any()
    assert (negative["region_class_targets"] == -1).all()
    # Corrupted exactly like a true pair: the input alone cannot tell ITM the label.
    assert torch.equal(negative["input_ids"], true_pair["input_ids"])
    assert torch.equal(negative["region_features"], true_pair["region_features"])
    assert negative["itm_label"].item() == 0

    random_pair = processor(dict(image, sentence="a cat"))
    assert random_pair["itm_label"].item() == -1 and random_pair["region_masked"].sum() == 3
    assert (random_pair["lm_label_ids"] != -1).sum() == 2  # "a", "cat"
    with pytest.raises(ValueError, match="itm_label"):
        processor(dict(image, sentence="a cat", itm_label=2))
    with pytest.raises(ValueError, match="region_classes"):
        processor(dict(image, sentence="a cat", region_classes=None))


def test_pair_masking_rates():
    processor = PairMaskingProcessor(PARAMS)
    g = torch.Generator().manual_seed(0)
    regions = words = 0
    for _ in range(400):
        out = processor(dict(_image(), sentence="one two three four five six"), g)
        regions += int(out["region_masked"].sum())
        words += int((out["lm_label_ids"] != -1).sum())
    assert regions / (400 * 3) == pytest.approx(0.15, abs=0.03)
    assert words / (400 * 6) == pytest.approx(0.15, abs=0.03)


def test_image_tag_masking_masks_a_masked_regions_tag_too():
    """U-VisualBERT: every word-piece of a masked region's tag is an MLM target; tags are
    also masked on their own. R-T (independent masking) breaks the first rule."""
    params = dict(PARAMS, max_seq_length=L, mask_prob=0.3)
    joint, independent = ImageTagMaskingProcessor(params), RegionTagMaskingProcessor(params)
    pieces = [joint.tokenizer.tokenize(label) for label in LABELS]
    owner = [r for r, p in enumerate(pieces) for _ in p]  # region of text position 1, 2, ...

    def violations(processor) -> tuple:
        g = torch.Generator().manual_seed(4)
        hidden_tag = alone = 0
        for _ in range(300):
            out = processor(_image(), g)
            tag_masked = (out["lm_label_ids"][1 : 1 + len(owner)] != -1).tolist()
            masked = out["region_masked"].tolist()
            hidden_tag += any(masked[r] and not tag_masked[t] for t, r in enumerate(owner))
            alone += any(tag_masked[t] and not masked[r] for t, r in enumerate(owner))
        return hidden_tag, alone

    hidden_tag, alone = violations(joint)
    assert hidden_tag == 0 and alone > 0
    assert violations(independent)[0] > 0
    out = joint(_image(), torch.Generator().manual_seed(0))
    assert out["text_is_tag"][1 : 1 + len(owner)].tolist() == [1] * len(owner)


def test_image_masking_reads_regions_alone():
    """The round-robin image batches of the paper's Table 5: [CLS] [SEP] and the regions,
    about mask_prob of them masked (MRC, MRFR targets), no MLM target, no tag read."""
    processor = ImageMaskingProcessor(dict(PARAMS, max_seq_length=L, mask_prob=0.3))
    tokenizer = processor.tokenizer
    image = {key: value for key, value in _image().items() if key != "region_labels"}
    g = torch.Generator().manual_seed(2)
    masked = 0
    for _ in range(300):
        out = processor(image, g)
        assert out["input_ids"][:2].tolist() == [tokenizer.cls_token_id, tokenizer.sep_token_id]
        assert out["input_mask"].tolist() == [1, 1] + [0] * (L - 2)
        assert not (out["lm_label_ids"] != -1).any() and not out["text_is_tag"].any()
        chosen = out["region_masked"].bool()
        assert out["region_class_targets"][chosen].tolist() == [
            CLASSES[r] for r in range(3) if chosen[r]
        ]
        masked += int(chosen.sum())
    assert masked / (300 * 3) == pytest.approx(0.3, abs=0.05)


def test_text_masking_has_no_region_field():
    processor = TextMaskingProcessor(PARAMS)
    g = torch.Generator().manual_seed(1)
    selected = 0
    for _ in range(300):
        out = processor({"sentence": "one two three four five six"}, g)
        assert set(out) == {
            "input_ids",
            "input_mask",
            "segment_ids",
            "lm_label_ids",
            "itm_label",
            "curriculum_weighted",
            "targets",
        }
        assert out["input_mask"].tolist() == [1] * 8 + [0] * (L - 8)
        chosen = out["lm_label_ids"] != -1
        assert not chosen[0] and not chosen[7:].any()  # never [CLS], [SEP], padding
        selected += int(chosen.sum())
    assert selected / (300 * 6) == pytest.approx(0.15, abs=0.03)
    assert out["itm_label"].item() == -1 and out["curriculum_weighted"].item() is False
    with pytest.raises(ValueError, match="sentence"):
        processor({"text": "no sentence key"})


# ---------------------------------------------------------------------------- databases
def test_image_pool_split_feature_paths_and_captions(pool):
    train = ImagePoolDatabase(
        str(pool / "detections.jsonl"),
        "train",
        holdout_every=4,
        captions=str(pool / "text/captions_gt.tsv"),
        feature_key_template="pool/{image_id}",
    )
    val = ImagePoolDatabase(str(pool / "detections.jsonl"), "val", holdout_every=4)
    assert [item["image_id"] for item in val] == ["img0", "img4", "img8"]
    assert [item["position"] for item in train] == [1, 2, 3, 5, 6, 7, 9]
    assert train[0]["feature_path"] == "pool/img1.npy" and "caption" not in val[0]
    assert train[0]["region_labels"] == LABELS[:3] and train[0]["caption"] == _caption(1)


def test_image_pool_errors_name_the_file(pool, tmp_path):
    with pytest.raises(FileNotFoundError, match="predictions.tsv"):
        ImagePoolDatabase(str(tmp_path / "absent.tsv"), "train")
    partial = tmp_path / "captions.tsv"
    partial.write_text("img0\tonly one caption\n")
    with pytest.raises(ValueError, match="captions.tsv: no caption of image 'img1'"):
        ImagePoolDatabase(str(pool / "detections.jsonl"), "train", captions=str(partial))
    with pytest.raises(ValueError, match="no images for the train split"):
        ImagePoolDatabase(str(pool / "detections.jsonl"), "train", holdout_every=1)


def test_text_corpus_reads_comma_separated_files_and_splits(pool):
    files = f"{pool / 'text/captions.txt'},{pool / 'text/other.txt'}"
    everything = TextCorpusDatabase(files, "train")
    assert len(everything) == N + len(EXTRA_SENTENCES)  # the blank line is skipped
    assert everything[N]["sentence"] == EXTRA_SENTENCES[0]
    val = TextCorpusDatabase(files, "val", holdout_every=5)
    assert [item["sentence"] for item in val] == [_caption(0), _caption(5)] + EXTRA_SENTENCES[::5]
    assert len(TextCorpusDatabase(files, "train", holdout_every=5)) == len(everything) - 6


# ----------------------------------------------------------------------------- Aligned VLP
def test_aligned_vlp_pairs_each_image_with_its_caption_and_never_a_positive_as_negative(pool):
    dataset = _dataset(pool, "aligned_vlp")
    torch.manual_seed(0)
    negatives = 0
    for _ in range(60):
        for idx in range(N):
            raw = dataset.raw_input(idx)
            assert _image_number(raw["features"]) == idx  # the item's own features
            assert raw["region_labels"] == LABELS[: _regions(idx)]
            assert raw["region_classes"].tolist() == CLASSES[: _regions(idx)]
            if raw["itm_label"] == 1:
                assert raw["sentence"] == _caption(idx)
            else:
                negatives += 1
                # another image's caption, never the positive: images 8 and 9 share one
                assert raw["sentence"] != _caption(idx)
                assert raw["sentence"] in {_caption(k) for k in range(N)}
    assert negatives / (60 * N) == pytest.approx(0.5, abs=0.1)


def test_aligned_vlp_batch(pool):
    unmasked = {"type": "uvla_pair_masking", "params": dict(PARAMS, mask_prob=0.0)}
    dataset = _dataset(
        pool, "aligned_vlp", negative_prob=0.0, processors={"masking_processor": unmasked}
    )
    batch = SampleList(default_collate([dataset[idx] for idx in (3, 4)]))
    assert batch.image_id == ["img3", "img4"] and batch.itm_label.tolist() == [1, 1]
    assert batch.region_mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]
    tokenizer = dataset.masking_processor.tokenizer
    texts = [
        tokenizer.decode(ids[mask == 1], skip_special_tokens=True)
        for ids, mask in zip(batch.input_ids, batch.input_mask)
    ]
    assert texts == [_caption(3), _caption(4)]
    target = batch.region_features_target
    assert _image_number(target[0]) == 3 and _image_number(target[1]) == 4


def test_aligned_vlp_needs_captions_and_two_images(pool):
    with pytest.raises(UserConfigError, match="dataset_config.aligned_vlp.captions must be set"):
        _dataset(pool, "aligned_vlp", captions=None)
    assert len(_dataset(pool, "aligned_vlp", "val", holdout_every=9)) == 2  # img0, img9
    with pytest.raises(UserConfigError, match="the val split has 1 image"):
        _dataset(pool, "aligned_vlp", "val", holdout_every=10)
    for bad in (1.5, "half"):
        with pytest.raises(
            UserConfigError,
            match=rf"dataset_config.aligned_vlp.negative_prob must be a number in \[0, 1\], "
            rf"got {bad!r}",
        ):
            _dataset(pool, "aligned_vlp", negative_prob=bad)


def test_bad_dataset_config_values_are_user_config_errors(pool):
    """Each ends mmf_run in its one line (mmf_uvlp.training.cli_errors), naming its key."""
    cases = [
        ("u_visualbert_image", {"use_features": False}, r"u_visualbert_image.use_features must"),
        ("u_visualbert_image", {"fast_read": True}, r"u_visualbert_image.fast_read: not supported"),
    ]
    for name, changes, message in cases:
        with pytest.raises(UserConfigError, match=message):
            _dataset(pool, name, **changes)


# ------------------------------------------------------------------- random / true pairs
def _own(dataset) -> list:
    return [dataset.sentence(idx) == _caption(idx) for idx in range(len(dataset))]


def test_random_pairs_never_use_the_images_own_caption(pool):
    for seed in range(8):  # own captions are 1 in 10 of these sentences
        dataset = _dataset(pool, "random_pairs", pairing_seed=seed, sentences=["text/captions.txt"])
        assert not any(_own(dataset))
        for idx in range(N):
            raw = dataset.raw_input(idx)
            assert _image_number(raw["features"]) == idx and raw["sentence"] == dataset.sentence(
                idx
            )
    sentences = {_dataset(pool, "random_pairs", pairing_seed=s).sentence(0) for s in range(8)}
    assert len(sentences) > 2  # random partners, not a fixed one


@pytest.mark.parametrize("ratio,true_pairs", [(0.0, 0), (0.4, 4), (0.5, 5), (1.0, 10)])
def test_true_pair_ratio_on_the_pool(pool, ratio, true_pairs):
    dataset = _dataset(pool, "random_pairs", true_pair_ratio=ratio, pairing_seed=3)
    own = _own(dataset)
    assert sum(own) == true_pairs
    assert own == dataset.true_pairs.tolist()  # only the chosen images keep their caption
    again = _dataset(pool, "random_pairs", true_pair_ratio=ratio, pairing_seed=3)
    assert [again.sentence(i) for i in range(N)] == [dataset.sentence(i) for i in range(N)]


def test_forty_percent_true_pairs_over_a_large_sample():
    chosen = choose_true_pairs(20_000, 0.4, seed=11)
    assert int(chosen.sum()) == 8_000
    halves = chosen.view(2, -1).float().mean(1)  # spread over the indices, not a block
    assert torch.allclose(halves, torch.tensor([0.4, 0.4]), atol=0.02)
    assert torch.equal(chosen, choose_true_pairs(20_000, 0.4, seed=11))
    assert not torch.equal(chosen, choose_true_pairs(20_000, 0.4, seed=12))
    own = [f"caption {i % 50}" for i in range(2_000)]
    sentences = [f"caption {i}" for i in range(50)]
    partners = draw_partners(own, sentences, choose_true_pairs(2_000, 0.4, seed=1), seed=1)
    assert sum(p == -1 for p in partners) == 800
    assert all(sentences[p] != own[i] for i, p in enumerate(partners) if p >= 0)


def test_random_pairs_settings_are_checked(pool):
    with pytest.raises(UserConfigError, match="captions must be set"):
        _dataset(pool, "random_pairs", true_pair_ratio=0.2, captions=None)
    assert not any(
        _own(_dataset(pool, "random_pairs", captions=None, sentences=["text/other.txt"]))
    )
    with pytest.raises(
        UserConfigError, match="dataset_config.random_pairs.true_pair_ratio must be a number in"
    ):
        _dataset(pool, "random_pairs", true_pair_ratio=40)
    with pytest.raises(UserConfigError, match="sentences: expected a list"):
        _dataset(pool, "random_pairs", sentences="text/other.txt")
    with pytest.raises(UserConfigError, match="pairing_seed must be set"):
        _dataset(pool, "random_pairs", pairing_seed=None)
    with pytest.raises(ValueError, match="own caption"):  # only own captions to draw from
        draw_partners(["a"], ["a"], torch.zeros(1, dtype=torch.bool), seed=0)


# ---------------------------------------------------------------------------- U-VisualBERT
def test_u_visualbert_samples_are_uni_modal(pool):
    text = _dataset(pool, "u_visualbert_text")
    image = _dataset(pool, "u_visualbert_image")
    assert len(text) == N + len(EXTRA_SENTENCES) and len(image) == N
    sentence = text[N]
    assert "region_features" not in sentence and sentence.input_ids.shape == (L,)
    pair = image[1]
    assert _image_number(pair.region_features_target) == 1 and pair.image_id == "img1"
    assert int(pair.text_is_tag.sum()) == sum(
        len(text.masking_processor.tokenizer.tokenize(t)) for t in LABELS
    )


def test_round_robin_image_samples_have_no_text(pool):
    """u_visualbert_image read through ``uvla_image_masking`` (the round-robin row of Table 5):
    every sample is [CLS] [SEP] with its image's regions."""
    processor = {"masking_processor": {"type": "uvla_image_masking", "params": dict(PARAMS)}}
    image = _dataset(pool, "u_visualbert_image", processors=processor)
    for idx in range(len(image)):
        sample = image[idx]
        assert int(sample.input_mask.sum()) == 2 and not sample.text_is_tag.any()
        assert not (sample.lm_label_ids != -1).any()
        assert _image_number(sample.region_features_target) == idx


def _round_robin(pool: Path, epochs: int, seed: int) -> list:
    """The dataset of each batch MMF's multi-dataset loader yields, epoch by epoch."""
    config = OmegaConf.create(
        {
            "datasets": "u_visualbert_text,u_visualbert_image",
            "dataset_config": {
                name: _config(pool, name) for name in ("u_visualbert_text", "u_visualbert_image")
            },
            "training": registry.get("config").training,
        }
    )
    loader = MultiDatasetLoader("train")
    loader.load(config)
    np.random.seed(seed)
    torch.manual_seed(seed)
    runs = []
    for _ in range(epochs):
        names = []
        for batch in loader:
            batch = loader.prepare_batch(SampleList(batch))  # MMF switches the corpus here
            uni_modal = ("region_features" in batch) == (batch.dataset_name == "u_visualbert_image")
            assert uni_modal, batch.dataset_name
            names.append(batch.dataset_name)
        runs.append(names)
    return runs


def test_u_visualbert_round_robin_draws_whole_uni_modal_batches_in_proportion(pool):
    """30 sentences (15 batches of 2) and 10 images (5 batches): every batch comes from one
    corpus, each epoch yields every batch once, and a corpus is drawn with probability
    proportional to its size (30/40 text, not 1/2) while both still have batches."""
    epochs = _round_robin(pool, 150, seed=0)
    for names in epochs:
        assert names.count("u_visualbert_text") == 15 and names.count("u_visualbert_image") == 5
    switches = sum(a != b for names in epochs for a, b in zip(names, names[1:]))
    assert switches > 150 * 3  # the corpora alternate within an epoch, not one after the other
    # draws 2..4 (the first batch of an epoch comes from the corpus the last epoch ended on):
    # neither corpus can be exhausted yet
    early = [name for names in epochs for name in names[1:4]]
    assert early.count("u_visualbert_text") / len(early) == pytest.approx(30 / 40, abs=0.07)


# ------------------------------------------------------------------------ text-only model
def test_uvla_encodes_text_only_batches_when_allowed():
    config = {
        "bert_model_name": None,
        "bert_config": {
            "vocab_size": 30522,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
        "feature_dim": D,
        "num_region_classes": 8,
        "heads": ["mlm", "mrc", "mrfr"],
        "curriculum": {"enabled": False},
        "text_only_batches": True,
        "losses": [{"type": "uvla_mlm"}, {"type": "uvla_mrc"}, {"type": "uvla_mrfr"}],
    }
    model = UVLA(OmegaConf.create(config))
    model.build()
    model.init_losses()
    processor = TextMaskingProcessor(dict(PARAMS, mask_prob=0.5))
    g = torch.Generator().manual_seed(0)
    batch = SampleList(
        default_collate([processor({"sentence": "a dog runs on the grass"}, g) for _ in range(3)])
    )
    batch.dataset_name, batch.dataset_type = "u_visualbert_text", "train"
    output = model(batch)
    losses = output["losses"]
    assert losses["train/u_visualbert_text/uvla_mlm"] > 0
    assert (
        losses["train/u_visualbert_text/uvla_mrc"]
        == 0
        == losses["train/u_visualbert_text/uvla_mrfr"]
    )
    assert output["mlm_logits"].shape[0] == int((batch.lm_label_ids != -1).sum())
    sum(losses.values()).backward()
    # an image batch still goes through the same model
    image = ImageTagMaskingProcessor(dict(PARAMS, mask_prob=0.5))
    images = SampleList(default_collate([image(_image(), g) for _ in range(2)]))
    images.dataset_name, images.dataset_type = "u_visualbert_image", "train"
    image_output = model(images)
    masked = int((images.region_class_targets != -1).sum())  # regions with an MRC target
    assert masked > 0 and image_output["mrc_logits"].shape[0] == masked
    assert image_output["losses"]["train/u_visualbert_image/uvla_mrc"] > 0
    # and so does a batch of regions alone (no text to mask, so no MLM term)
    regions = ImageMaskingProcessor(dict(PARAMS, mask_prob=0.5))
    alone = SampleList(default_collate([regions(_image(), g) for _ in range(2)]))
    alone.dataset_name, alone.dataset_type = "u_visualbert_image", "train"
    alone_losses = model(alone)["losses"]
    assert alone_losses["train/u_visualbert_image/uvla_mlm"] == 0
    assert alone_losses["train/u_visualbert_image/uvla_mrc"] > 0
    sum(alone_losses.values()).backward()

    model.text_only_batches = False
    with pytest.raises(ValueError, match="text_only_batches: true"):
        model(batch)
