"""Builder of ``random_pairs``: images with random sentences (a ``true_pair_ratio`` share with their own caption); joint MLM + MRM."""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.pretraining import PretrainingBuilder
from mmf_uvlp.datasets.builders.random_pairs.dataset import RandomPairsDataset


@registry.register_builder("random_pairs")
class RandomPairsBuilder(PretrainingBuilder):
    NAME = "random_pairs"
    DATASET_CLASS = RandomPairsDataset
