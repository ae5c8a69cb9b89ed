"""A resumed run is the uninterrupted run, also when the checkpoint was taken after one
dataset of the multi-dataset pre-training had finished its epoch (``finished`` in the run
state): the sampler of a finished dataset is never iterated again in that epoch, so the
skip a resume gives it must not carry into the next epoch."""

import pytest

from mmf_uvlp.trainers.data_order import EpochSampler

from helpers import assert_resume_at_12_is_the_uninterrupted_run


def test_a_skip_still_pending_at_the_next_epoch_is_dropped():
    sampler = EpochSampler(12, seed=3)
    sampler.set_epoch(2)
    epoch_2 = list(sampler)
    sampler.set_epoch(1)
    sampler.skip_next(12)  # resumed after this dataset had used all its samples of epoch 1
    sampler.set_epoch(2)  # ... so it was not iterated before epoch 2
    assert list(sampler) == epoch_2 and sorted(epoch_2) == list(range(12))
    sampler.set_epoch(2)
    sampler.skip_next(8)
    assert list(sampler) == epoch_2[8:]


@pytest.mark.slow
def test_resume_after_a_dataset_finished_its_epoch_is_the_uninterrupted_run(tiny_corpus, tmp_path):
    # tiny world, batch 16: R-T has 3 batches, R-N and I-S 5 each, so epoch 2 begins at update
    # 14; at update 12, R-T and R-N have finished epoch 1
    assert_resume_at_12_is_the_uninterrupted_run(tmp_path, tiny_corpus.parent)
