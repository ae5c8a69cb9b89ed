"""μ-VLA masking processors: the batch contract, masking statistics and determinism."""

import os

import pytest
import torch

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor
from mmf_uvlp.processors.region_phrase_masking import (
    RegionPhraseMaskingProcessor,
    linked_mask_probabilities,
)
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor

TOKENIZER = os.environ["UVLP_BERT"]
L, R, P, D = 32, 24, 4, 6
PARAMS = {
    "tokenizer_path": TOKENIZER,
    "max_seq_length": L,
    "max_regions": R,
    "max_phrase_tokens": P,
}
MASK_ID, PAD_ID = 103, 0


def _image(n: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    x1 = torch.rand(n, generator=g) * 50
    y1 = torch.rand(n, generator=g) * 50
    boxes = torch.stack([x1, y1, x1 + 10 + torch.rand(n, generator=g) * 40, y1 + 20], dim=1)
    return {
        "features": torch.rand(n, D, generator=g) + 0.5,
        "boxes": boxes,
        "image_width": 100,
        "image_height": 80,
    }


@pytest.fixture(scope="module")
def rt():
    return RegionTagMaskingProcessor(PARAMS)


@pytest.fixture(scope="module")
def rn():
    return RegionPhraseMaskingProcessor(PARAMS)


@pytest.fixture(scope="module")
def is_():
    return ImageSentenceMaskingProcessor(PARAMS)


def _rt_item(n: int = 20):
    return dict(_image(n), region_labels=["dog"] * n, region_classes=list(range(n)))


def test_processors_are_registered():
    get = registry.get_processor_class
    assert get("uvla_region_tag_masking") is RegionTagMaskingProcessor
    assert get("uvla_region_phrase_masking") is RegionPhraseMaskingProcessor
    assert get("uvla_image_sentence_masking") is ImageSentenceMaskingProcessor


def test_region_tag_contract(rt):
    item = dict(_image(3), region_labels=["dog", "tennis racket", "man"], region_classes=[5, 6, 7])
    out = rt(item, torch.Generator().manual_seed(0))
    shapes = {
        "input_ids": (L,),
        "input_mask": (L,),
        "segment_ids": (L,),
        "lm_label_ids": (L,),
        "text_boxes": (L, 5),
        "text_is_tag": (L,),
        "region_features": (R, D),
        "region_features_target": (R, D),
        "region_boxes": (R, 5),
        "region_mask": (R,),
        "region_zeroed": (R,),
        "region_masked": (R,),
        "region_class_targets": (R,),
        "region_phrase_targets": (R, P),
        "itm_label": (),
        "curriculum_weighted": (),
        "targets": (),
    }
    assert {k: tuple(v.shape) for k, v in out.items()} == shapes
    # [CLS] dog tennis ##... man [SEP]: each piece carries its region's box, no text position.
    pieces = [rt.tokenizer.tokenize(t) for t in ("dog", "tennis racket", "man")]
    length = 2 + sum(map(len, pieces))
    assert out["input_mask"].tolist() == [1] * length + [0] * (L - length)
    assert out["text_is_tag"][:length].tolist() == [0] + [1] * (length - 2) + [0]
    owners = [r for r, p in enumerate(pieces) for _ in p]
    assert torch.equal(out["text_boxes"][1 : length - 1], out["region_boxes"][owners])
    box = item["boxes"][0].tolist()
    assert out["region_boxes"][0].tolist() == pytest.approx(
        [
            box[0] / 100,
            box[1] / 80,
            box[2] / 100,
            box[3] / 80,
            (box[2] - box[0]) * (box[3] - box[1]) / 8000,
        ],
        rel=1e-5,
    )
    assert out["region_mask"].tolist() == [1] * 3 + [0] * (R - 3)
    assert torch.equal(out["region_features_target"][:3], item["features"])  # the ORIGINAL features
    assert out["itm_label"].item() == -1 and out["curriculum_weighted"].item() is False
    assert out["targets"].item() == -1


def test_region_tag_masking_statistics(rt):
    g = torch.Generator().manual_seed(1)
    item = _rt_item()
    selected = mask = rand = keep = tags = 0
    regions_masked = regions_zeroed = real_regions = 0
    for _ in range(400):
        out = rt(item, g)
        chosen = out["lm_label_ids"] != -1
        assert not chosen[out["text_is_tag"] == 0].any()  # never [CLS], [SEP] or padding
        tags += int(out["text_is_tag"].sum())
        selected += int(chosen.sum())
        ids = out["input_ids"][chosen]
        mask += int((ids == MASK_ID).sum())
        keep += int((ids == out["lm_label_ids"][chosen]).sum())
        rand += int(((ids != MASK_ID) & (ids != out["lm_label_ids"][chosen])).sum())
        masked = out["region_masked"].bool()
        assert not masked[out["region_mask"] == 0].any()  # never padding
        real_regions += int(out["region_mask"].sum())
        regions_masked += int(masked.sum())
        regions_zeroed += int((out["region_features"][masked].abs().sum(-1) == 0).sum())
        zeroed = (out["region_features"].abs().sum(-1) == 0) & out["region_mask"].bool()
        assert torch.equal(out["region_zeroed"], zeroed)  # the zeroed regions, named
        assert torch.equal(out["region_class_targets"][masked], torch.arange(R)[masked])
        assert (out["region_class_targets"][~masked] == -1).all()
        kept = ~masked
        assert torch.equal(out["region_features"][kept], out["region_features_target"][kept])
    assert selected / tags == pytest.approx(0.15, abs=0.015)
    assert mask / selected == pytest.approx(0.8, abs=0.04)
    assert rand / selected == pytest.approx(0.1, abs=0.03)
    assert keep / selected == pytest.approx(0.1, abs=0.03)
    assert regions_masked / real_regions == pytest.approx(0.15, abs=0.02)
    assert regions_zeroed / regions_masked == pytest.approx(0.9, abs=0.04)


def test_masks_are_reproducible_from_a_generator_the_global_seed_or_the_seed_param(rt):
    item = _rt_item()
    a = rt(item, torch.Generator().manual_seed(7))
    b = rt(item, torch.Generator().manual_seed(7))
    c = rt(item, torch.Generator().manual_seed(8))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    torch.manual_seed(5)  # no generator, no seed param: torch's global RNG
    first_global = rt(item)
    torch.manual_seed(5)
    assert all(torch.equal(first_global[k], v) for k, v in rt(item).items())
    seeded = [RegionTagMaskingProcessor(dict(PARAMS, seed=3)) for _ in range(2)]
    first = [seeded[0](item) for _ in range(3)]
    second = [seeded[1](item) for _ in range(3)]
    assert all(torch.equal(x[k], y[k]) for x, y in zip(first, second) for k in x)


SENTENCE = "a red sofa stands near the white wall and a small dog"
#           0         1         2         3         4         5
PHRASES = [
    {"text": "a red sofa", "char_span": [0, 10], "region": 0, "link_score": 0.2},
    {"text": "the white wall", "char_span": [23, 37], "region": 1, "link_score": 0.4},
    {"text": "a small dog", "char_span": [42, 53], "region": 2, "link_score": 0.6},
    {"text": "sofa", "char_span": [6, 10], "region": None, "link_score": 0.0, "linked": False},
]


def _rn_item():
    return dict(_image(4), sentence=SENTENCE, noun_phrases=PHRASES)


def test_linked_mask_probabilities_are_proportional_to_the_score():
    p = linked_mask_probabilities(torch.tensor([0.2, 0.4, 0.6]), 0.5)
    assert p.tolist() == pytest.approx([0.25, 0.5, 0.75])
    p = linked_mask_probabilities(torch.tensor([1.0, 9.0]), 0.5)
    assert p.tolist() == pytest.approx([0.1, 0.9])


def test_region_phrase_masking_statistics(rn):
    g = torch.Generator().manual_seed(2)
    tokens = rn.tokenizer(SENTENCE, return_offsets_mapping=True)
    # word-piece positions of each linked phrase, without "a" / "the"
    phrase_pos = []
    for phrase in PHRASES[:3]:
        s, e = phrase["char_span"]
        phrase_pos.append(
            [
                t
                for t, (a, b) in enumerate(tokens["offset_mapping"])
                if b > a and a < e and b > s and tokens["input_ids"][t] not in rn.stop_ids
            ]
        )
    assert [len(p) for p in phrase_pos] == [2, 2, 2]
    linked_positions = {t for p in phrase_pos for t in p}
    counts = {"text": [0, 0, 0], "region": [0, 0, 0]}
    samples = {"text": 0, "region": 0}
    zeroed = masked_regions = 0
    item = _rn_item()
    for _ in range(2000):
        out = rn(item, g)
        text = out["lm_label_ids"] != -1
        regions = out["region_masked"].bool()
        assert text.any() != regions.any()  # exactly one modality, at least one item
        assert set(text.nonzero().view(-1).tolist()) <= linked_positions  # only linked tokens
        assert not regions[3:].any()  # region 3 is not linked; padding never
        if text.any():
            samples["text"] += 1
            for k, pos in enumerate(phrase_pos):
                whole = text[pos]
                assert whole.all() or not whole.any()  # a phrase is masked whole
                counts["text"][k] += int(whole.all())
        else:
            samples["region"] += 1
            for k in range(3):
                counts["region"][k] += int(regions[k])
            masked_regions += int(regions.sum())
            zeroed += int((out["region_features"][regions].abs().sum(-1) == 0).sum())
            for k in regions.nonzero().view(-1).tolist():
                pieces = out["region_phrase_targets"][k]
                expected = [tokens["input_ids"][t] for t in phrase_pos[k]]
                assert pieces[pieces >= 0].tolist() == expected
        assert (out["region_phrase_targets"][~regions] == -1).all()
        assert (out["region_class_targets"] == -1).all() and "region_features_target" not in out
        assert out["curriculum_weighted"].item() is True and out["itm_label"].item() == -1
    assert samples["text"] / 2000 == pytest.approx(0.5, abs=0.04)
    # P(item k masked) = p_k + P(none) * s_k / sum(s): proportional to the score s_k.
    none = 0.75 * 0.5 * 0.25
    expected = [p + none * s / 1.2 for p, s in zip([0.25, 0.5, 0.75], [0.2, 0.4, 0.6])]
    for modality in counts:
        rates = [c / samples[modality] for c in counts[modality]]
        assert rates == pytest.approx(expected, abs=0.05), modality
        assert rates[2] / rates[0] == pytest.approx(3.0, rel=0.2)
    assert zeroed / masked_regions == pytest.approx(0.9, abs=0.04)


def test_region_phrase_without_linked_items_is_not_masked(rn):
    not_kept = [dict(PHRASES[0], region=5)]  # links a region that is not in the image
    item = dict(_image(2), sentence=SENTENCE, noun_phrases=not_kept)
    out = rn(item, torch.Generator().manual_seed(0))
    assert (out["lm_label_ids"] == -1).all() and not out["region_masked"].any()


def test_image_sentence_masking(is_):
    g = torch.Generator().manual_seed(3)
    selected = candidates = 0
    corrupted = {0: 0, 1: 0}
    for label in [0, 1] * 150:
        out = is_(dict(_image(3), sentence=SENTENCE, itm_label=label), g)
        length = int(out["input_mask"].sum())
        corrupted[label] += int((out["input_ids"] == is_.tokenizer.mask_token_id).sum())
        chosen = out["lm_label_ids"] != -1
        if label == 0:  # random negatives: no MLM target (MLM is on retrieved pairs)
            assert not chosen.any()
            continue
        assert not chosen[0] and not chosen[length - 1 :].any()  # never [CLS], [SEP], padding
        selected += int(chosen.sum())
        candidates += length - 2
        assert out["itm_label"].item() == label == out["targets"].item()
        assert out["curriculum_weighted"].item() is True and not out["region_masked"].any()
        assert (out["input_ids"][length:] == PAD_ID).all()
    assert selected / candidates == pytest.approx(0.15, abs=0.025)
    # Negatives are corrupted as often as positives: [MASK] tokens carry no ITM label.
    assert corrupted[0] == pytest.approx(corrupted[1], rel=0.3) and corrupted[0] > 0
    with pytest.raises(ValueError, match="itm_label"):
        is_(dict(_image(3), sentence=SENTENCE, itm_label=-1))


def test_weighted_samples_carry_their_clean_pair(rt, rn, is_):
    """R-N and I-S samples (curriculum-weighted) carry the unmasked sentence and features,
    from which the model reads w_ITM; I-S negatives too (their corrupted tokens have no MLM
    target to restore them from). R-T samples are not weighted and carry neither."""
    g = torch.Generator().manual_seed(5)
    unmasked = rn.pad_text(rn.tokenizer(SENTENCE)["input_ids"])
    image = _image(4)
    seen = {"rn": 0, "is": 0}
    for _ in range(40):
        for kind, out in (
            ("rn", rn(dict(image, sentence=SENTENCE, noun_phrases=PHRASES), g)),
            ("is", is_(dict(image, sentence=SENTENCE, itm_label=_ % 2), g)),
        ):
            assert torch.equal(out["clean_input_ids"], unmasked)
            assert torch.equal(out["clean_region_features"][:4], image["features"])
            assert (out["clean_region_features"][4:] == 0).all()
            seen[kind] += int(
                not torch.equal(out["input_ids"], unmasked)
                or not torch.equal(out["region_features"], out["clean_region_features"])
            )
    # the masked input differs from the clean one (unless a masked region kept its features)
    assert seen["rn"] > 30 and seen["is"] > 20
    out = rt(_rt_item(), g)
    assert "clean_input_ids" not in out and "clean_region_features" not in out


def test_clear_errors_name_the_missing_field(rt, rn):
    with pytest.raises(ValueError, match="region_labels"):
        rt(_image(2))
    with pytest.raises(ValueError, match="image_width"):
        rt(dict(_rt_item(), image_width=None))
    with pytest.raises(ValueError, match="link_score"):
        rn(dict(_image(2), sentence=SENTENCE, noun_phrases=[dict(PHRASES[0], link_score=-1)]))
    with pytest.raises(ValueError, match="tokenizer_path"):
        RegionTagMaskingProcessor({})


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("mask_prob", 1.5, r"params.mask_prob must be a number in \[0, 1\], got 1.5"),
        ("zero_prob", "most", r"params.zero_prob must be a number in \[0, 1\], got 'most'"),
        ("max_seq_length", 2, r"params.max_seq_length must be a whole number >= 3, got 2"),
        ("max_regions", "many", r"params.max_regions must be a whole number >= 1, got 'many'"),
        ("random_token_prob", 0.5, r"params.mask_token_prob \+ params.random_token_prob"),
        ("tokenizer_path", None, r"params.tokenizer_path \(a local BERT tokenizer folder\)"),
    ],
)
def test_bad_processor_params_are_user_config_errors_naming_the_processor(param, value, message):
    """Each ends mmf_run in its one line (mmf_uvlp.training.cli_errors)."""
    with pytest.raises(UserConfigError, match=f"processor RegionTagMaskingProcessor: {message}"):
        RegionTagMaskingProcessor(dict(PARAMS, **{param: value}))


def test_a_bad_linked_mask_ratio_is_a_user_config_error():
    with pytest.raises(
        UserConfigError,
        match="processor RegionPhraseMaskingProcessor: params.linked_mask_ratio must be a "
        "number > 0, got 'half'",
    ):
        RegionPhraseMaskingProcessor(dict(PARAMS, linked_mask_ratio="half"))
