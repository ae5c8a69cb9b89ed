"""Stage 4: top-K sentences per tag query by cosine similarity, with FAISS.

* ``auto`` (default): ``flat`` up to ``retrieve.exact_max`` corpus sentences, ``hnsw`` above
  (``resolve_index_kind``): exact search costs queries x sentences, which at Conceptual
  Captions scale (3.3 M x 3.3 M) is a day of CPU, and an IVF index keeps its recall only by
  probing a fixed share of the lists, which costs as much again; HNSW's search grows with
  the log of the corpus (measured in docs/benchmarks.md).
* ``flat``: exact, ``IndexFlatIP`` over the L2-normalised sentence embeddings.
* ``ivf``: ``IndexIVFFlat`` (inner product), ``nlist`` lists (default 4*sqrt(n)) trained on a
  seeded sample, ``nprobe`` lists searched.
* ``hnsw``: ``IndexHNSWFlat`` (inner product), ``M`` links, ``efSearch``. FAISS >= 1.15 builds
  the same graph with any number of threads (``parallel_hnsw_is_deterministic``); with an
  older FAISS it is built single-threaded (``run.deterministic_hnsw``) so that the graph (and
  the output) is reproducible.

Approximate indexes are saved next to the sentence embeddings and shared by all shards. Their
quality is measured, not assumed: on a seeded sample of queries (``retrieve.recall_sample`` in
all, spread over the chunks) the retrieved sentences are compared with those the same
retrieval gives over an exact, streamed brute-force search (``ExactSearch``,
``output_recall``).

Candidates are re-scored in float64 and ordered by (score desc, sentence id asc), so that the
output does not depend on how queries were batched. ``overfetch`` extra candidates are searched
so that excluded ones (an image's own caption, a text already chosen for the image) can be
replaced; if still short, the search is repeated with a larger k.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from mmf_uvlp.corpus.stage import StageContext
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file
from mmf_uvlp.utils.atomic import atomic_path, atomic_write_json


def _faiss():
    import faiss

    return faiss


def resolve_index_kind(kind: str, sentences: int, exact_max: int) -> str:
    """The index ``retrieve.index`` stands for over a corpus of ``sentences``."""
    if kind != "auto":
        return kind
    return "flat" if sentences <= exact_max else "hnsw"


def recall_sample_size(cfg, total_chunks: int) -> int:
    """Queries per chunk checked against exact search: ``recall_sample_per_chunk``, else
    ``recall_sample`` spread over the chunks (at least 1 each while ``recall_sample`` > 0), so
    that the exact check costs about the same whatever the number of images."""
    if cfg.recall_sample_per_chunk is not None:
        return max(0, int(cfg.recall_sample_per_chunk))
    if cfg.recall_sample <= 0:
        return 0
    return max(1, math.ceil(cfg.recall_sample / max(1, total_chunks)))


def index_key(kind: str, params: Dict[str, object], n: int, dim: int) -> str:
    text = repr((kind, sorted(params.items()), n, dim))
    return f"faiss-{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.index"


def index_path(
    kind: str, cfg, n: int, dim: int, cache_dir: Optional[str], deterministic: bool = True
) -> Optional[str]:
    """Where an approximate index of these settings over ``n`` x ``dim`` vectors is saved in
    ``cache_dir`` (None for ``flat``, which is rebuilt: adding vectors is all it costs)."""
    if kind == "ivf":
        params = {
            "nlist": ivf_nlist(n, cfg.ivf_nlist),
            "train": cfg.ivf_train_size,
            "seed": cfg.seed,
        }
    elif kind == "hnsw":
        params = {"m": cfg.hnsw_m, "efc": cfg.hnsw_ef_construction, "det": bool(deterministic)}
    elif kind == "flat":
        return None
    else:
        raise ValueError(f"unknown index kind {kind!r}")
    return os.path.join(cache_dir, index_key(kind, params, n, dim)) if cache_dir else None


def ivf_nlist(n: int, nlist: Optional[int]) -> int:
    if nlist:
        return max(1, min(int(nlist), n))
    return max(1, min(n, int(round(4 * math.sqrt(max(n, 1))))))


def build_index(
    embeddings: np.ndarray,
    kind: str = "flat",
    cfg=None,
    cache_dir: Optional[str] = None,
    deterministic: bool = True,
    block: int = 65536,
):
    """A FAISS inner-product index over ``embeddings`` (read from a memmap in blocks)."""
    faiss = _faiss()
    n, dim = embeddings.shape
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
        for start in range(0, n, block):
            index.add(np.ascontiguousarray(embeddings[start : start + block], dtype=np.float32))
        return index
    nlist = ivf_nlist(n, cfg.ivf_nlist)
    path = index_path(kind, cfg, n, dim, cache_dir, deterministic)
    if path and os.path.exists(path):
        index = faiss.read_index(path)
    else:
        if kind == "ivf":
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = int(cfg.seed)
            rng = np.random.default_rng(cfg.seed)
            size = min(n, max(int(cfg.ivf_train_size), nlist))
            sample = np.sort(rng.choice(n, size=size, replace=False))
            index.train(np.ascontiguousarray(embeddings[sample], dtype=np.float32))
            for start in range(0, n, block):
                index.add(np.ascontiguousarray(embeddings[start : start + block], dtype=np.float32))
        else:
            index = faiss.IndexHNSWFlat(dim, int(cfg.hnsw_m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = int(cfg.hnsw_ef_construction)
            threads = faiss.omp_get_max_threads()
            if deterministic and not parallel_hnsw_is_deterministic():
                faiss.omp_set_num_threads(1)
            try:
                for start in range(0, n, block):
                    index.add(
                        np.ascontiguousarray(embeddings[start : start + block], dtype=np.float32)
                    )
            finally:
                faiss.omp_set_num_threads(threads)
        if path:
            with atomic_path(path) as temporary:
                faiss.write_index(index, temporary)
    set_search_params(index, kind, cfg)
    return index


def parallel_hnsw_is_deterministic() -> bool:
    """Whether FAISS builds the same HNSW graph with any number of threads (its lock-free
    deterministic build, FAISS >= 1.15); older versions build it single-threaded when
    ``run.deterministic_hnsw`` is on."""
    return hasattr(_faiss(), "hnsw_add_vertices_deterministic")


def set_search_params(index, kind: str, cfg) -> None:
    if kind == "ivf":
        index.nprobe = int(cfg.ivf_nprobe)
    elif kind == "hnsw":
        index.hnsw.efSearch = int(cfg.hnsw_ef_search)


def search(index, queries: np.ndarray, k: int, batch: int = 1024) -> Tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` of shape ``[n, k]`` (ids -1 where fewer than k exist)."""
    k = max(1, min(k, index.ntotal)) if index.ntotal else 1
    scores = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), batch):
        q = np.ascontiguousarray(queries[start : start + batch], dtype=np.float32)
        scores[start : start + len(q)], ids[start : start + len(q)] = index.search(q, k)
    return scores, ids


def rescore(query: np.ndarray, ids: np.ndarray, embeddings: np.ndarray) -> List[Tuple[float, int]]:
    """Exact float64 cosine of candidates, ordered by (score desc, id asc)."""
    ids = np.unique(ids[ids >= 0])  # sorted
    if ids.size == 0:
        return []
    vectors = np.asarray(embeddings[ids], dtype=np.float64)
    scores = vectors @ np.asarray(query, dtype=np.float64)
    scores = scores.astype(np.float32)  # canonical precision of the output
    order = np.lexsort((ids, -scores.astype(np.float64)))
    return [(float(scores[i]), int(ids[i])) for i in order]


def select(
    candidates: List[Tuple[float, int]],
    k: int,
    hashes: np.ndarray,
    excluded: Set[int],
    unique_texts: bool,
) -> Tuple[List[Tuple[float, int]], int]:
    """First ``k`` candidates that are not excluded (own caption) nor repeats of a chosen text.

    Returns the chosen ``(score, id)`` list and the number of own-caption candidates dropped.
    """
    chosen: List[Tuple[float, int]] = []
    seen: Set[int] = set()
    dropped_own = 0
    for score, sid in candidates:
        h = int(hashes[sid])
        if h in excluded:
            dropped_own += 1
            continue
        if unique_texts and h in seen:
            continue
        seen.add(h)
        chosen.append((score, sid))
        if len(chosen) == k:
            break
    return chosen, dropped_own


def retrieve(
    index,
    queries: np.ndarray,
    embeddings: np.ndarray,
    hashes: np.ndarray,
    k: int,
    overfetch: int,
    excluded: Optional[Sequence[Set[int]]] = None,
    unique_texts: bool = True,
    batch: int = 1024,
) -> Tuple[np.ndarray, np.ndarray, int]:
    """Top-``k`` ``(ids, scores)`` per query (ids -1 / scores NaN where fewer exist)."""
    n = len(queries)
    out_ids = np.full((n, k), -1, dtype=np.int64)
    out_scores = np.full((n, k), np.nan, dtype=np.float32)
    total = index.ntotal
    if n == 0 or total == 0:
        return out_ids, out_scores, 0
    k_search = min(total, k + overfetch)
    _, cand = search(index, queries, k_search, batch)
    dropped = 0
    for i in range(n):
        ex = excluded[i] if excluded is not None else set()
        width = k_search
        ids_i = cand[i]
        while True:
            chosen, own = select(
                rescore(queries[i], ids_i, embeddings), k, hashes, ex, unique_texts
            )
            if len(chosen) == k or width >= total:
                break
            width = min(total, width * 4)
            _, more = search(index, queries[i : i + 1], width, 1)
            ids_i = more[0]
        dropped += own
        for r, (score, sid) in enumerate(chosen):
            out_ids[i, r] = sid
            out_scores[i, r] = score
    return out_ids, out_scores, dropped


def exact_topk(
    embeddings: np.ndarray, queries: np.ndarray, k: int, block: int = 65536
) -> Tuple[np.ndarray, np.ndarray]:
    """Brute-force top-k by streaming the (memory-mapped) embeddings; ``(scores, ids)``."""
    n = embeddings.shape[0]
    nq = len(queries)
    k = min(k, n)
    best_s = np.full((nq, 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((nq, 0), dtype=np.int64)
    q = np.asarray(queries, dtype=np.float32)
    for start in range(0, n, block):
        chunk = np.asarray(embeddings[start : start + block], dtype=np.float32)
        s = q @ chunk.T
        if s.shape[1] > k:  # the block's own top k first: a partition, not a full sort
            top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            s, ids = np.take_along_axis(s, top, axis=1), top + start
        else:
            ids = np.broadcast_to(np.arange(start, start + len(chunk)), s.shape)
        all_s = np.concatenate([best_s, s], axis=1)
        all_i = np.concatenate([best_i, ids], axis=1)
        order = np.lexsort((all_i, -all_s), axis=1)[:, :k]  # score desc, then id asc
        best_s = np.take_along_axis(all_s, order, axis=1)
        best_i = np.take_along_axis(all_i, order, axis=1)
    return best_s, best_i


class ExactSearch:
    """``search`` of an index, done by ``exact_topk`` over the (memory-mapped) embeddings: the
    reference an approximate index is measured against, without holding a flat index."""

    def __init__(self, embeddings: np.ndarray) -> None:
        self.embeddings = embeddings
        self.ntotal = int(embeddings.shape[0])

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        return exact_topk(self.embeddings, queries, k)


def output_recall(
    approx_scores: np.ndarray, exact_scores: np.ndarray, eps: float = 1e-5
) -> np.ndarray:
    """Per query: share of the sentences an exact search would give (``retrieve`` over
    ``ExactSearch``: the same exclusions and de-duplication) that the approximate retrieval
    gave, a sentence scoring at least the exact k-th score (minus ``eps``) counting as found,
    so that ties between equal-scoring sentences are not misses."""
    out = np.ones(len(exact_scores), dtype=np.float64)
    for i, (approx, exact) in enumerate(zip(approx_scores, exact_scores)):
        exact = exact[~np.isnan(exact)]
        if exact.size == 0:
            continue
        approx = approx[~np.isnan(approx)]
        out[i] = min(1.0, float(np.sum(approx >= exact[-1] - eps)) / exact.size)
    return out


def recall_at_k(
    approx_ids: np.ndarray,
    queries: np.ndarray,
    embeddings: np.ndarray,
    k: int,
    eps: float = 1e-5,
) -> np.ndarray:
    """Per query: share of the approximate top-k that belongs to the exact top-k.

    A result counts when its exact score reaches the k-th exact score (minus ``eps``), so
    that ties between duplicate sentences are not counted as misses.
    """
    exact_s, _ = exact_topk(embeddings, queries, k)
    out = np.zeros(len(queries), dtype=np.float64)
    for i in range(len(queries)):
        ids = approx_ids[i][approx_ids[i] >= 0][:k]
        if exact_s.shape[1] == 0:
            continue
        kth = exact_s[i, -1]
        scores = np.asarray(embeddings[np.sort(ids)], dtype=np.float32) @ queries[i]
        out[i] = float(np.sum(scores >= kth - eps)) / exact_s.shape[1]
    return out


class _ChunkSearch:
    """What the retrieve stage searches with: the index, the corpus embeddings and
    hashes, and the settings of ``retrieve``."""

    def __init__(self, builder: StageContext, detected: Dict[str, object]) -> None:
        from mmf_uvlp.corpus.embed import load_corpus_embeddings

        self.builder = builder
        self.config = builder.config.retrieve
        store = builder.store
        self.embeddings = load_corpus_embeddings(builder.sentence_cache)
        self.hashes = np.asarray(store.hashes)
        self.kind = resolve_index_kind(self.config.index, len(store), self.config.exact_max)
        self.sample_size = recall_sample_size(self.config, detected["total_chunks"])
        build_clock = Clock()
        self.index = builder.sentence_index(self.embeddings)
        add_timing(builder.timings, "retrieve_index_build", build_clock, len(store), "sentences")
        self.edges = np.linspace(-1.0, 1.0, self.config.histogram_bins + 1)

    def chunk(
        self, chunk: int, images: List[Dict[str, object]]
    ) -> Tuple[np.ndarray, np.ndarray, Dict[str, object]]:
        """Sentence ids and scores (images x k; -1 / NaN where none) of ``chunk``, and its
        stats (score histogram, sampled recall against exact search, caption recall)."""
        config = self.config
        queries = np.load(chunk_file(os.path.join(self.builder.work, "queries"), chunk, "npy"))
        own = (
            [set(self.builder.captions.get(image["image_id"], ())) for image in images]
            if config.exclude_own_caption
            else None
        )
        ids, scores, dropped = retrieve(
            self.index,
            queries,
            self.embeddings,
            self.hashes,
            config.k,
            config.overfetch,
            own,
            config.unique_texts,
            config.query_batch_size,
        )
        empty = np.array([not image["tag_query"] for image in images], dtype=bool)
        ids[empty], scores[empty] = -1, np.nan  # tags.on_empty=keep: no query, no sentences
        valid = scores[~np.isnan(scores)]
        stats = {
            "queries": len(images),
            "retrieved": int(valid.size),
            "short": int(np.sum(np.sum(ids >= 0, axis=1) < config.k)),
            "own_caption_dropped": int(dropped),
            "histogram": np.histogram(np.clip(valid, -1, 1), bins=self.edges)[0].tolist(),
            "score_sum": float(np.sum(valid.astype(np.float64))),
            "top1_sum": float(np.nansum(scores[:, 0].astype(np.float64))) if len(images) else 0.0,
        }
        rows = np.flatnonzero(~empty)
        if self.kind != "flat" and self.sample_size > 0 and rows.size:
            stats["recall_sample"] = self._sampled_recall(chunk, rows, queries, scores, own)
        if self.builder.config.inputs.captions_gt:
            stats["gt"] = self._caption_recall(images, ids)
        return ids, scores, stats

    def _sampled_recall(
        self,
        chunk: int,
        rows: np.ndarray,
        queries: np.ndarray,
        scores: np.ndarray,
        own: Optional[List[Set[int]]],
    ) -> Dict[str, object]:
        """Recall of the index against exact search on a seeded sample of the queries."""
        config = self.config
        generator = np.random.default_rng([config.seed, chunk])
        sample = np.sort(
            generator.choice(rows, size=min(rows.size, self.sample_size), replace=False)
        )
        _, exact, _ = retrieve(
            ExactSearch(self.embeddings),
            queries[sample],
            self.embeddings,
            self.hashes,
            config.k,
            config.overfetch,
            [own[i] for i in sample] if own is not None else None,
            config.unique_texts,
        )
        recall = output_recall(scores[sample], exact)
        return {"n": int(sample.size), "sum": float(recall.sum())}

    def _caption_recall(
        self, images: List[Dict[str, object]], ids: np.ndarray
    ) -> Dict[str, object]:
        """Per rank r: the images whose true caption is among their first r sentences."""
        k = ids.shape[1]
        out = {"images_with_caption": 0, "caption_in_pool": 0, "hits": [0] * k}
        for row, image in enumerate(images):
            true = self.builder.captions.get(image["image_id"])
            if not true:
                continue
            out["images_with_caption"] += 1
            if not self.builder.store.in_pool(np.array(true, dtype=np.uint64)).any():
                continue
            out["caption_in_pool"] += 1
            true_set = set(true)
            got = [int(self.hashes[s]) in true_set if s >= 0 else False for s in ids[row]]
            for rank in range(k):
                if any(got[: rank + 1]):
                    out["hits"][rank] += 1
        return out


def stage_retrieve(
    builder: StageContext, chunks: Sequence[int], detected: Dict[str, object]
) -> None:
    """Stage 4: the top-K sentences of each image of ``chunks``, one ``work/retrieval``
    ``.npz`` (ids, scores) and ``.json`` (stats) per chunk."""
    directory, todo = builder.todo("retrieval", chunks, "npz")
    if not todo:
        return
    search = _ChunkSearch(builder, detected)
    if search.config.exclude_own_caption or builder.config.inputs.captions_gt:
        builder.ground_truth(chunks)
    clock, count = Clock(), 0
    bar = builder.progress("retrieve", builder.owned_images(detected, todo))
    for chunk in todo:
        images = builder.load_detections(chunk)["images"]
        ids, scores, stats = search.chunk(chunk, images)
        atomic_write_json(chunk_file(directory, chunk, "json"), stats)
        path = chunk_file(directory, chunk, "npz")
        with atomic_path(path, extension=".npz") as temporary:
            np.savez(temporary, ids=ids, scores=scores)
        count += len(images)
        bar.update(len(images))
        builder.after_chunk("retrieve", chunk)
    bar.close()
    add_timing(builder.timings, "retrieve", clock, count, "images")
