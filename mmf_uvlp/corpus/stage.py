"""What a stage of the corpus build (:mod:`.detections`, :mod:`.embed`, :mod:`.retrieve`,
:mod:`.noun_phrases`, :mod:`.link`) may use of the build it runs in: its config, folders,
shared resources, bookkeeping and the readers of earlier stages' outputs.

:class:`mmf_uvlp.corpus.pipeline.CorpusBuilder` (the conductor) is one; the stages name this
protocol, not the conductor, so they do not import it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Set, Tuple

import numpy as np

from mmf_uvlp.corpus.config import CorpusConfig
from mmf_uvlp.corpus.sentences import SentenceStore


class StageContext(Protocol):
    """The build as one stage sees it."""

    config: CorpusConfig
    out: str  # the shard's output folder
    work: str  # its working folder: each stage's per-chunk files
    shard: Tuple[int, int]  # (index, count)
    sentence_cache: str
    resources: Any  # models loaded once per process (pipeline.Resources)
    after_chunk: Callable[[str, int], None]  # called after each chunk of a stage
    timings: Dict[str, Dict[str, float]]
    store: Optional[SentenceStore]  # the sentence cache, once prepared
    captions: Optional[Dict[str, List[int]]]  # ground truth, see ground_truth
    objects: Optional[Dict[str, Set[str]]]

    def progress(self, description: str, total: Optional[int], unit: str = "img") -> Any:
        """A progress bar of a stage."""

    def owned_images(self, detected: Dict[str, object], chunks: Sequence[int]) -> int:
        """The number of images of this shard's ``chunks``."""

    def todo(self, stage: str, chunks: Sequence[int], extension: str) -> Tuple[str, List[int]]:
        """The folder of ``stage``'s outputs and the chunks still to do."""

    def load_detections(self, chunk: int) -> Dict[str, object]:
        """The detections of ``chunk`` (the detections stage's output)."""

    def load_retrieval(self, chunk: int) -> Tuple[np.ndarray, np.ndarray, Dict[str, object]]:
        """The retrieval of ``chunk`` (the retrieval stage's output)."""

    def sentence_index(self, embeddings: np.ndarray) -> Any:
        """The search index over the sentence embeddings."""

    def ground_truth(self, chunks: Sequence[int]) -> None:
        """Load the ground truth of ``chunks`` into ``captions`` and ``objects``."""
