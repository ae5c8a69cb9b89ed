"""Builder of ``aligned_vlp``: each image with its true caption; MLM, ITM, MRC, MRFR."""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.aligned_vlp.dataset import AlignedVLPDataset
from mmf_uvlp.datasets.builders.pretraining import PretrainingBuilder


@registry.register_builder("aligned_vlp")
class AlignedVLPBuilder(PretrainingBuilder):
    NAME = "aligned_vlp"
    DATASET_CLASS = AlignedVLPDataset
