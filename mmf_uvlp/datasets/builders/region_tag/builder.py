"""Builder of ``uvla_region_tag``: R-T, input [tags; regions] of one image"""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.region_tag.dataset import RegionTagDataset
from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedBuilder


@registry.register_builder("uvla_region_tag")
class RegionTagBuilder(WeaklyAlignedBuilder):
    NAME = "uvla_region_tag"
    DATASET_CLASS = RegionTagDataset
