"""Batches of the μ-VLA processors collated both ways, MMF's fixed-size collation and the
plugin's (:mod:`mmf_uvlp.datasets.collate`), from the same random draws, and a tiny
dropout-free uvla with the curriculum active."""

import os

import pytest
import torch
from omegaconf import OmegaConf

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.sample import SampleList
from mmf_uvlp.datasets.collate import collate, restore_region_copies
from mmf_uvlp.models.uvla import UVLA
from mmf_uvlp.processors.image_masking import ImageMaskingProcessor
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor
from mmf_uvlp.processors.image_tag_masking import ImageTagMaskingProcessor
from mmf_uvlp.processors.pair_masking import PairMaskingProcessor
from mmf_uvlp.processors.region_phrase_masking import RegionPhraseMaskingProcessor
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor
from mmf_uvlp.processors.text_masking import TextMaskingProcessor
from mmf_uvlp.trainers.progress import clear_train_samples, register_train_samples

BERT = os.environ["UVLP_BERT"]
D, L, R, CLASSES = 6, 24, 10, 12
LOSSES = ["uvla_mlm", "uvla_mrc", "uvla_mrfr", "uvla_pmrtc", "uvla_itm"]
SENTENCES = [
    "a red sofa near the white wall",
    "a dog",
    "the man holding a tennis racket sitting on a wooden chair near the old window of the house",
]
PHRASES = [
    {"char_span": [0, 10], "region": 0, "link_score": 0.8},
    {"char_span": [16, 30], "region": 2, "link_score": 0.5},
]
# Float32 sums over fewer padded positions, in another order: the losses agree to this.
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def registry_state():
    """MMF's config in the registry, and an epoch in which the curriculum is active."""
    saved = {key: registry.get(key, None, no_warning=True) for key in ("config", "num_updates")}
    saved_sizes = registry.get("uvla_train_samples", {}, no_warning=True)
    registry.register(
        "config",
        OmegaConf.create({"evaluation": {"predict": False}, "training": {"batch_size": 4}}),
    )
    clear_train_samples()
    register_train_samples("toy", 8)
    registry.register("num_updates", 4)  # epoch 2: the clean-pair pass runs
    yield
    for key, value in saved.items():
        registry.register(key, value)
    registry.register("uvla_train_samples", saved_sizes)


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
        "pair": PairMaskingProcessor(params),
        "text": TextMaskingProcessor(params),
        "image_tag": ImageTagMaskingProcessor(params),
        "image": ImageMaskingProcessor(params),
    }


def tiny_model() -> UVLA:
    torch.manual_seed(0)
    model = UVLA(
        OmegaConf.create(
            {
                "bert_model_name": None,
                "bert_config": {
                    "vocab_size": 30522,
                    "hidden_size": 32,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "intermediate_size": 64,
                    "hidden_dropout_prob": 0.0,
                    "attention_probs_dropout_prob": 0.0,
                },
                "attention": "sdpa",
                "feature_dim": D,
                "num_region_classes": CLASSES,
                "heads": ["mlm", "mrc", "mrfr", "pmrtc", "itm"],
                "curriculum": {"enabled": True, "start_epoch": 1},
                "losses": [{"type": name} for name in LOSSES],
            }
        )
    )
    model.build()
    model.init_losses()
    return model


def raw_item(kind: str, i: int) -> dict:
    """Sample i: 3 to 6 regions of R = 10, sentences of 4 to 20 word-pieces of L = 24."""
    n = 3 + i % 4
    g = torch.Generator().manual_seed(i)
    x1 = torch.rand(n, generator=g) * 40
    image = {
        "features": torch.rand(n, D, generator=g) + 0.1,
        "image_width": 100,
        "image_height": 100,
        "boxes": torch.stack([x1, x1, x1 + 30, x1 + 50], dim=1),
        "region_classes": [(i + r) % CLASSES for r in range(n)],
    }
    sentence = SENTENCES[i % 3]
    if kind in ("rt", "image_tag"):
        return dict(image, region_labels=["dog", "tennis racket", "man", "wall", "sky", "car"][:n])
    if kind == "text":
        return {"sentence": sentence}
    if kind == "image":
        return image
    if kind == "rn":
        return dict(image, sentence=sentence, noun_phrases=PHRASES)
    return dict(image, sentence=sentence, itm_label=i % 2)


def both_batches(processors, kind: str, size: int = 6, finished: bool = True):
    """(MMF's collation of the fixed-size samples, ``collate`` of the unpadded ones), the
    same random draws in both; ``finished``: the collated batch's original features rebuilt,
    as the dataset's ``prepare_batch`` hands it to the model."""
    old, new = [], []
    for i in range(size):
        raw = raw_item(kind, i)
        old.append(processors[kind](raw, torch.Generator().manual_seed(100 + i)))
        new.append(processors[kind](raw, torch.Generator().manual_seed(100 + i), padded=False))
    old_batch, new_batch = SampleList(old), collate(new)
    for batch in (old_batch, new_batch):
        batch.dataset_name, batch.dataset_type = "toy", "train"
    if finished:
        restore_region_copies(new_batch)
    return old_batch, new_batch
