"""Builders of U-VisualBERT's uni-modal data: ``u_visualbert_text`` (text-only MLM) and
``u_visualbert_image`` ([tags; regions]: tag MLM, MRC, MRFR with joint masking)."""

from mmf.common.registry import registry
from mmf_uvlp.datasets.builders.pretraining import PretrainingBuilder
from mmf_uvlp.datasets.builders.u_visualbert.dataset import (
    UVisualBERTImageDataset,
    UVisualBERTTextDataset,
)


@registry.register_builder("u_visualbert_text")
class UVisualBERTTextBuilder(PretrainingBuilder):
    NAME = "u_visualbert_text"
    DATASET_CLASS = UVisualBERTTextDataset


@registry.register_builder("u_visualbert_image")
class UVisualBERTImageBuilder(PretrainingBuilder):
    NAME = "u_visualbert_image"
    DATASET_CLASS = UVisualBERTImageDataset
