"""The plugin's batches (padded to the batch's longest, one copy of the features, host
indices) give the losses of MMF's fixed-size collation on the same samples, and so do
batches of resident-feature table rows, padded or not."""
# ruff: noqa: F811  (pytest fixtures imported from helpers.collated are test parameters)

import pytest
import torch

from mmf.common.sample import SampleList
from mmf_uvlp.batch import ragged
from mmf_uvlp.datasets.collate import collate, restore_region_copies
from mmf_uvlp.datasets.resident_features import ResidentFeatures

from helpers.collated import (  # noqa: F401  (fixtures)
    ATOL,
    BERT,
    D,
    L,
    LOSSES,
    R,
    RTOL,
    both_batches,
    processors,
    raw_item,
    registry_state,
    tiny_model,
)


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair", "image"])
def test_collated_batches_give_the_losses_of_fixed_size_batches(processors, kind):
    old, new = both_batches(processors, kind)
    model = tiny_model()
    old_losses, new_losses = model(old)["losses"], model(new)["losses"]
    assert sorted(old_losses) == sorted(new_losses) == sorted(f"train/toy/{n}" for n in LOSSES)
    for name, value in old_losses.items():
        torch.testing.assert_close(new_losses[name], value, rtol=RTOL, atol=ATOL, msg=name)
    assert sum(float(v) for v in old_losses.values()) > 0


class _RawFeatures:
    """A feature location holding the raw items' rows (image ``i`` named ``"i"``), read as
    :class:`~mmf_uvlp.datasets.region_features.RegionFeaturesDatabase` reads one."""

    path = "raw-items"

    def __init__(self, kind: str):
        self.kind = kind

    def from_path(self, name: str) -> dict:
        return {"image_feature_0": raw_item(self.kind, int(name))["features"], "image_info_0": {}}


@pytest.mark.parametrize("padded", [False, True], ids=["collated", "fixed-size"])
@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair"])
def test_resident_feature_rows_give_the_losses_of_read_features(processors, kind, padded):
    table = ResidentFeatures()
    entries = table.load(_RawFeatures(kind), [str(i) for i in range(6)], "toy")
    read, resident = [], []
    for i in range(6):
        raw = raw_item(kind, i)
        start, rows, _ = entries[str(i)]
        handles = dict(
            raw, features=torch.empty((rows, 0)), feature_rows=torch.arange(start, start + rows)
        )
        for samples, item in ((read, raw), (resident, handles)):
            samples.append(
                processors[kind](item, torch.Generator().manual_seed(100 + i), padded=padded)
            )
    batches = [SampleList(samples) if padded else collate(samples) for samples in (read, resident)]
    for batch in batches:
        batch.dataset_name, batch.dataset_type = "toy", "train"
    assert batches[1].region_features.shape[-1] == 0
    table.fill(batches[1])  # as the dataset's prepare_batch finishes them
    for batch in batches:
        restore_region_copies(batch)
    model = tiny_model()
    read_losses, resident_losses = (model(batch)["losses"] for batch in batches)
    assert sorted(read_losses) == sorted(resident_losses)
    for name, value in read_losses.items():
        torch.testing.assert_close(resident_losses[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair"])
def test_a_collated_batch_is_cut_to_its_longest_and_holds_the_features_once(processors, kind):
    old, new = both_batches(processors, kind, finished=False)
    text = int(old.input_mask.sum(1).max())
    regions = int(old.region_mask.sum(1).max())
    assert text < L and regions < R  # the fixtures leave padding to cut
    assert new.input_ids.shape == (6, text) and new.region_features.shape == (6, regions, D)
    for key, value in new.items():
        if torch.is_tensor(value) and value.dim() > 1 and key in old:
            assert torch.equal(value, old[key][:, : value.size(1)]), key
    copies = [k for k in ("region_features_target", "clean_region_features") if k in old]
    assert new["region_copies"] == copies and copies  # no second copy in the batch
    assert not any(k in new for k in copies)
    restore_region_copies(new)
    for key in copies:
        assert torch.equal(new[key], old[key][:, :regions]), key
    assert torch.equal(ragged(new, "lm_label_index"), (old.lm_label_ids != -1).nonzero())
    assert new["curriculum_weighted_host"] == old.curriculum_weighted.tolist()


@pytest.mark.parametrize("kind", ["rt", "rn", "is"])
def test_padding_to_a_multiple_rounds_the_lengths_up_and_keeps_the_losses(processors, kind):
    old, new = both_batches(processors, kind)
    samples = [
        processors[kind](raw_item(kind, i), torch.Generator().manual_seed(100 + i), padded=False)
        for i in range(6)
    ]
    text, regions = new.input_ids.size(1), new.region_features.size(1)
    padded = []
    for multiple in (4, 7):
        bucketed = collate(samples, multiple)
        bucketed.dataset_name, bucketed.dataset_type = "toy", "train"
        restore_region_copies(bucketed)  # as the dataset's prepare_batch hands it over
        expected = (
            min(-(-text // multiple) * multiple, L),
            min(-(-regions // multiple) * multiple, R),
        )
        assert (bucketed.input_ids.size(1), bucketed.region_features.size(1)) == expected
        padded.append(expected != (text, regions))
        assert bucketed.region_mask.size(1) == expected[1]
        model = tiny_model()
        losses, reference = model(bucketed)["losses"], model(new)["losses"]
        for name, value in reference.items():
            torch.testing.assert_close(losses[name], value, rtol=RTOL, atol=ATOL, msg=name)
    assert any(padded)  # a multiple padded something
    with pytest.raises(ValueError, match="multiple of 0"):
        collate(samples, 0)


def test_samples_with_different_fields_are_refused(processors):
    first = processors["rt"](raw_item("rt", 0), padded=False)
    second = dict(first)
    del second["region_features_target"]
    with pytest.raises(ValueError, match="sample 1 has fields"):
        collate([first, second])


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair", "text", "image_tag"])
def test_a_batch_is_masked_as_its_samples_alone_with_one_tokenizer_call(processors, kind):
    """``processor.batch``: each sample the same as alone from the same generator, whatever
    else is in its batch (so the seeding is the per-sample one), the text of the whole batch
    tokenized at once (R-T's tags: only those not tokenized before)."""
    processor = processors[kind]
    raws = [raw_item(kind, i) for i in range(6)]
    alone = [
        processor(raw, torch.Generator().manual_seed(100 + i), padded=False)
        for i, raw in enumerate(raws)
    ]
    calls = []
    tokenizer = processor.tokenizer
    original = type(tokenizer).__call__
    type(tokenizer).__call__ = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        batch = processor.batch(raws, [torch.Generator().manual_seed(100 + i) for i in range(6)])
    finally:
        type(tokenizer).__call__ = original
    assert len(calls) == (kind not in ("rt", "image_tag"))
    assert len(batch) == len(alone)
    for one, other in zip(batch, alone):
        assert sorted(one) == sorted(other)
        for key, value in other.items():
            assert torch.equal(one[key], value), (kind, key)
    assert any(bool((sample["lm_label_ids"] != -1).any()) for sample in batch)
    reordered = processor.batch(
        raws[::-1], [torch.Generator().manual_seed(100 + i) for i in reversed(range(6))]
    )
    for one, other in zip(reordered[::-1], alone):
        assert all(torch.equal(one[key], value) for key, value in other.items()), kind


def test_batched_masking_keeps_the_rates_and_the_80_10_10_rule(processors):
    """R-T masked 40 samples a batch: tags and real regions each with mask_prob (0.4 here),
    selected tags 80 % [MASK] / 10 % a random word-piece / 10 % kept, selected regions
    zeroed 90 %, never padding, [CLS] or [SEP] (method.md)."""
    processor = processors["rt"]
    raws = [raw_item("rt", i) for i in range(40)]
    selected = masked = randomized = kept = tags = 0
    regions = real = zeroed = 0
    for round_ in range(12):
        generators = [torch.Generator().manual_seed(1000 * round_ + i) for i in range(40)]
        for out in processor.batch(raws, generators, padded=True):
            chosen = out["lm_label_ids"] != -1
            assert not chosen[out["text_is_tag"] == 0].any()
            tags += int(out["text_is_tag"].sum())
            selected += int(chosen.sum())
            ids, targets = out["input_ids"][chosen], out["lm_label_ids"][chosen]
            masked += int((ids == processor.tokenizer.mask_token_id).sum())
            kept += int((ids == targets).sum())
            randomized += int(((ids != processor.tokenizer.mask_token_id) & (ids != targets)).sum())
            region = out["region_masked"].bool()
            assert not region[out["region_mask"] == 0].any()
            real += int(out["region_mask"].sum())
            regions += int(region.sum())
            zeroed += int(out["region_zeroed"][region].sum())
            assert not out["region_zeroed"][~region].any()
    assert selected / tags == pytest.approx(0.4, abs=0.03)
    assert masked / selected == pytest.approx(0.8, abs=0.04)
    assert randomized / selected == pytest.approx(0.1, abs=0.03)
    assert kept / selected == pytest.approx(0.1, abs=0.03)
    assert regions / real == pytest.approx(0.4, abs=0.04)
    assert zeroed / regions == pytest.approx(0.9, abs=0.04)


def test_tag_word_pieces_are_tokenized_once_and_the_cache_stays_bounded(monkeypatch):
    from mmf_uvlp.processors import region_tag_masking
    from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor, tag_word_pieces

    processor = RegionTagMaskingProcessor(
        {"tokenizer_path": BERT, "max_seq_length": L, "max_regions": R}
    )
    monkeypatch.setattr(region_tag_masking, "TAG_CACHE_SIZE", 5)
    first = [raw_item("rt", i) for i in range(3)]
    expected = [tag_word_pieces(processor.tokenizer, raw["region_labels"][:R], L) for raw in first]
    for encoded, raw, (ids, _) in zip(processor.encode(first), first, expected):
        assert [piece for tag in encoded for piece in tag] == ids[1:-1]
    assert len(processor._tag_pieces) == 5
    other = dict(first[0], region_labels=["zebra", "kite", "dog"], region_classes=[1, 2, 3])
    other["features"], other["boxes"] = other["features"][:3], other["boxes"][:3]
    encoded = processor.encode([other, first[1]])  # more new tags than the cache holds
    assert encoded[1] == processor.encode([first[1]])[0]
    assert [p for tag in encoded[0] for p in tag] == tag_word_pieces(
        processor.tokenizer, ["zebra", "kite", "dog"], L
    )[0][1:-1]
    assert len(processor._tag_pieces) <= 6


def test_more_linked_phrases_than_a_samples_draws_hold(processors):
    """R-N: a sentence with more linked phrases than L + R draws: still seeded per sample."""
    processor = processors["rn"]
    words = ["dog"] * (L + R + 6)
    sentence = " ".join(words)
    phrases = [
        {"char_span": [4 * k, 4 * k + 3], "region": k % 3, "link_score": 1.0 + k}
        for k in range(len(words))
    ]
    raw = dict(raw_item("rn", 0), sentence=sentence, noun_phrases=phrases)
    draws = {}
    for seed in range(40):
        alone = processor(raw, torch.Generator().manual_seed(seed), padded=False)
        batch = processor.batch(
            [raw_item("rn", 1), raw],
            [torch.Generator().manual_seed(7), torch.Generator().manual_seed(seed)],
        )[1]
        assert all(torch.equal(batch[k], v) for k, v in alone.items())
        draws[seed] = (alone["lm_label_ids"] != -1).sum() + alone["region_masked"].sum()
    assert min(draws.values()) >= 1 and len(set(int(v) for v in draws.values())) > 1


def test_a_datasets_batch_is_its_samples_alone_and_leaves_device_generators_alone(
    processors, monkeypatch
):
    """Each sample's draws follow from its seed whatever its batch (the dataset's own draw
    too), and seeding them touches neither the process's CPU stream nor any device's."""
    from mmf_uvlp.datasets.builders.pretraining import PretrainingDataset
    from mmf_uvlp.trainers.data_order import SampleIndex

    class Toy(PretrainingDataset):
        def raw_input(self, idx):
            return dict(raw_item("is", int(idx)), itm_label=int(torch.rand(()) < 0.5))

    dataset = Toy.__new__(Toy)
    dataset.dataset_name, dataset.masking_processor = "toy", processors["is"]
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    state = torch.get_rng_state()
    alone = [dataset.sample_fields(SampleIndex(i, 50 + i), padded=False) for i in range(5)]
    assert reseeded == [] and torch.equal(torch.get_rng_state(), state)
    batch = dataset.batch_fields([SampleIndex(i, 50 + i) for i in (3, 0, 4, 1, 2)], padded=False)
    for i, fields in zip((3, 0, 4, 1, 2), batch):
        for key, value in alone[i].items():
            assert torch.equal(fields[key], value), (i, key)
    assert len({int(fields["itm_label"]) for fields in alone}) == 2
