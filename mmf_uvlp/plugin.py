"""Registration of the plugin's components into MMF's registry."""

import importlib

COMPONENT_MODULES = (
    "mmf_uvlp.models.uvla",
    "mmf_uvlp.losses.mlm",
    "mmf_uvlp.losses.mrc",
    "mmf_uvlp.losses.mrfr",
    "mmf_uvlp.losses.pmrtc",
    "mmf_uvlp.losses.itm",
    "mmf_uvlp.processors.region_tag_masking",
    "mmf_uvlp.processors.region_phrase_masking",
    "mmf_uvlp.processors.image_sentence_masking",
    "mmf_uvlp.datasets.builders.region_tag.builder",
    "mmf_uvlp.datasets.builders.region_phrase.builder",
    "mmf_uvlp.datasets.builders.image_sentence.builder",
    "mmf_uvlp.datasets.builders.refcoco_plus.builder",
    "mmf_uvlp.metrics.refcoco",
    "mmf_uvlp.processors.pair_masking",
    "mmf_uvlp.processors.text_masking",
    "mmf_uvlp.processors.image_tag_masking",
    "mmf_uvlp.processors.image_masking",
    "mmf_uvlp.datasets.builders.aligned_vlp.builder",
    "mmf_uvlp.datasets.builders.random_pairs.builder",
    "mmf_uvlp.datasets.builders.u_visualbert.builder",
    "mmf_uvlp.datasets.builders.masked_aligned_vlp.builder",
    "mmf_uvlp.models.visual_bert_uvlp",
    "mmf_uvlp.models.vilbert_uvlp",
    "mmf_uvlp.models.vl_bert",
    "mmf_uvlp.trainers.uvlp_trainer",
)

_registered = False


def register_components() -> None:
    """Import every component module once; their decorators fill MMF's registry."""
    global _registered
    if _registered:
        return
    _registered = True
    from mmf_uvlp.trainers.throughput import register_resolvers
    from mmf_uvlp.utils import bert_source, world_preset

    bert_source.register_resolver()
    world_preset.register_resolver()
    register_resolvers()
    for name in COMPONENT_MODULES:
        importlib.import_module(name)
