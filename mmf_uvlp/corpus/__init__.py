"""Weakly aligned image-text corpus builder (μ-VLA, paper section 3.2), without MMF.

For every image: detector tags -> tag query -> top-K sentences of an unpaired text corpus by
sentence-BERT cosine -> noun phrases of those sentences -> each phrase linked to a region.
Output: annotation shards (``shards.py`` documents the schema) read by the pre-training
datasets. Entry points: ``build`` / ``merge`` / ``prepare_sentences`` (``pipeline.py``),
``load_config`` (``config.py``), ``iter_records`` (``shards.py``); CLI:
``uvlp-build-corpus``. Guide: ``docs/corpus.md``.
"""

from mmf_uvlp.corpus.config import CorpusConfig, load_config
from mmf_uvlp.corpus.pipeline import Resources, build, merge, parse_shard, prepare_sentences
from mmf_uvlp.corpus.shards import iter_records
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.error_policy import ErrorPolicy

__all__ = [
    "CorpusConfig",
    "ErrorPolicy",
    "FormatError",
    "Resources",
    "build",
    "iter_records",
    "load_config",
    "merge",
    "parse_shard",
    "prepare_sentences",
]
