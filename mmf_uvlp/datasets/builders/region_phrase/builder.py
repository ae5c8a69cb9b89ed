"""Builder of ``uvla_region_phrase``: R-N, input [retrieved sentence; regions]"""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.region_phrase.dataset import RegionPhraseDataset
from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedBuilder


@registry.register_builder("uvla_region_phrase")
class RegionPhraseBuilder(WeaklyAlignedBuilder):
    NAME = "uvla_region_phrase"
    DATASET_CLASS = RegionPhraseDataset
