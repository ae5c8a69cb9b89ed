"""The plugin's batches (padded to the batch's longest, one copy of the features, host
indices) give the losses of MMF's fixed-size collation on the same samples."""

import pytest
import torch

from mmf_uvlp.datasets.collate import collate, ragged, restore_region_copies

from helpers.collated import (  # noqa: F401  (fixtures)
    ATOL, D, L, LOSSES, R, RTOL, both_batches, processors, raw_item, registry_state, tiny_model,
)


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair"])
def test_collated_batches_give_the_losses_of_fixed_size_batches(processors, kind):
    old, new = both_batches(processors, kind)
    model = tiny_model()
    old_losses, new_losses = model(old)["losses"], model(new)["losses"]
    assert sorted(old_losses) == sorted(new_losses) == sorted(f"train/toy/{n}" for n in LOSSES)
    for name, value in old_losses.items():
        torch.testing.assert_close(new_losses[name], value, rtol=RTOL, atol=ATOL, msg=name)
    assert sum(float(v) for v in old_losses.values()) > 0


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair"])
def test_a_collated_batch_is_cut_to_its_longest_and_holds_the_features_once(processors, kind):
    old, new = both_batches(processors, kind)
    text = int(old.input_mask.sum(1).max())
    regions = int(old.region_mask.sum(1).max())
    assert text < L and regions < R  # the fixtures leave padding to cut
    assert new.input_ids.shape == (6, text) and new.region_features.shape == (6, regions, D)
    for key, value in new.items():
        if torch.is_tensor(value) and value.dim() > 1 and key in old:
            assert torch.equal(value, old[key][:, :value.size(1)]), key
    copies = [k for k in ("region_features_target", "clean_region_features") if k in old]
    assert new["region_copies"] == copies and copies  # no second copy in the batch
    assert not any(k in new for k in copies)
    restore_region_copies(new)
    for key in copies:
        assert torch.equal(new[key], old[key][:, :regions]), key
    assert torch.equal(ragged(new, "lm_label_index"), (old.lm_label_ids != -1).nonzero())
    assert new["curriculum_weighted_host"] == old.curriculum_weighted.tolist()


def test_samples_with_different_fields_are_refused(processors):
    first = processors["rt"](raw_item("rt", 0), padded=False)
    second = dict(first)
    del second["region_features_target"]
    with pytest.raises(ValueError, match="sample 1 has fields"):
        collate([first, second])


@pytest.mark.parametrize("kind", ["rt", "rn", "is", "pair", "text", "image_tag"])
def test_a_batch_is_masked_as_its_samples_alone_with_one_tokenizer_call(processors, kind):
    """``processor.batch``: each sample the same as alone from the same generator (so the
    masking rates, the 80/10/10 rule and the seeding are the per-sample ones), the text of
    the whole batch tokenized at once."""
    processor = processors[kind]
    raws = [raw_item(kind, i) for i in range(6)]
    alone = [processor(raw, torch.Generator().manual_seed(100 + i), padded=False)
             for i, raw in enumerate(raws)]
    calls = []
    tokenizer = processor.tokenizer
    original = type(tokenizer).__call__
    type(tokenizer).__call__ = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        batch = processor.batch(raws, [torch.Generator().manual_seed(100 + i) for i in range(6)])
    finally:
        type(tokenizer).__call__ = original
    assert len(calls) == 1
    assert len(batch) == len(alone)
    for one, other in zip(batch, alone):
        assert sorted(one) == sorted(other)
        for key, value in other.items():
            assert torch.equal(one[key], value), (kind, key)
    assert any(bool((sample["lm_label_ids"] != -1).any()) for sample in batch)


def test_a_datasets_batch_is_its_samples_alone_and_leaves_device_generators_alone(
        processors, monkeypatch):
    """Each sample's draws follow from its seed whatever its batch (the dataset's own draw
    too), and seeding them touches neither the process's CPU stream nor any device's."""
    from mmf_uvlp.datasets.builders.pretraining import PretrainingDataset
    from mmf_uvlp.training.reproducibility import SampleIndex

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
    batch = dataset.batch_fields([SampleIndex(i, 50 + i) for i in (3, 0, 4, 1, 2)],
                                 padded=False)
    for i, fields in zip((3, 0, 4, 1, 2), batch):
        for key, value in alone[i].items():
            assert torch.equal(fields[key], value), (i, key)
    assert len({int(fields["itm_label"]) for fields in alone}) == 2
