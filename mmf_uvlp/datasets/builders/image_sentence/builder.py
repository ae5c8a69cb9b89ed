"""Builder of ``uvla_image_sentence``: I-S, input [retrieved sentence; regions], half of them with a random sentence instead (ITM) plus MLM."""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.image_sentence.dataset import ImageSentenceDataset
from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedBuilder


@registry.register_builder("uvla_image_sentence")
class ImageSentenceBuilder(WeaklyAlignedBuilder):
    NAME = "uvla_image_sentence"
    DATASET_CLASS = ImageSentenceDataset
