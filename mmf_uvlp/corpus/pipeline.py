"""The corpus build: stages, chunks, shards, resumption.

Work is split into **chunks** of ``output.chunk_images`` images by position in the detections
file (chunk ``c`` = positions ``[c*n, (c+1)*n)``); shard ``i`` of ``N`` owns the chunks with
``c % N == i``. Every per-image computation (tag queries, query embeddings, search, phrases,
links) is done per chunk, so a chunk's output is the same whichever shard computes it, and the
merged shards equal a single run byte for byte.

Stages, each resumable per chunk (a chunk's file is written to a temporary name and moved in
place with ``os.replace``, so a file that exists is complete), in the order they run:

1. ``detections``: read + validate detections, build tag queries -> ``work/detections``
   (first: bad or empty detections stop the build before the costly embedding).
2. ``sentences`` (shared, ``prepare_sentences``): index the corpus, embed it into a memory-map.
3. ``queries``: embed tag queries -> ``work/queries``.
4. ``retrieve``: top-K search -> ``work/retrieval``.
5. ``phrases``: noun phrases of the distinct retrieved sentences -> ``work/phrases``.
6. ``link``: link phrases to regions, write ``annotations/part-*.jsonl.gz`` + ``stats/``.
7. ``finalize``: ``annotations/index.json`` and the report.

``state.json`` records the config fingerprint; a rerun with another config refuses to mix
outputs (use ``restart=True``, which also rebuilds a sentence cache of other inputs or
settings). The build deletes and writes only inside its output folder: a symbolic link in
place of one of its subfolders (``annotations/`` linked to a user's folder), or below one,
is refused before anything is deleted (:mod:`mmf_uvlp.utils.output_folder`). A build with
nothing usable left (no image, no sentence) stops with ``EmptyInputError`` naming the input
files. Killing the process at any point and rerunning gives the same bytes as an
uninterrupted run.
"""

from __future__ import annotations

import glob
import json
import math
import os
import resource
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mmf_uvlp.corpus.config import CorpusConfig
from mmf_uvlp.corpus.detections import DetectionReader
from mmf_uvlp.corpus.errors import EmptyInputError, ErrorPolicy
from mmf_uvlp.corpus.sentences import (
    SentenceStore,
    atomic_write_bytes,
    atomic_write_json,
    build_sentence_index,
    read_json,
)
from mmf_uvlp.corpus.report import link_score_band
from mmf_uvlp.corpus.tag_query import ranked_tags
from mmf_uvlp.utils.output_folder import check_no_links_below

STAGES = ("detections", "queries", "retrieve", "phrases", "link")
OUTPUT_FOLDERS = ("work", "annotations", "stats", "report")  # what a build writes and deletes
ABORT_ENV = "MMF_UVLP_CORPUS_ABORT_AFTER"  # "<stage>:<n>": exit abruptly after n chunks
Hook = Callable[[str, int], None]


def parse_shard(text: str) -> Tuple[int, int]:
    """``"i/N"`` -> ``(i, N)`` with ``0 <= i < N``."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--shard: expected i/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard: need 0 <= i < N, got {text!r}")
    return i, n


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Resources:
    """Models loaded once per process and shared by runs (and by tests)."""

    def __init__(self) -> None:
        self._cache: Dict[Tuple, object] = {}

    def _get(self, key: Tuple, make: Callable[[], object]):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def sentence_model(self, cfg):
        from mmf_uvlp.corpus.embed import load_sentence_model, resolve_devices

        key = ("sbert", cfg.model, cfg.device, cfg.max_seq_length)
        return self._get(key, lambda: load_sentence_model(
            cfg.model, resolve_devices(cfg.device)[0], cfg.allow_download, cfg.max_seq_length))

    def encode_pool(self, cfg):
        """sentence-transformers' multi-process pool when ``embed.device`` names several
        devices (every GPU with ``auto``), else None (encoding in this process)."""
        from mmf_uvlp.corpus.embed import resolve_devices

        devices = resolve_devices(cfg.device)
        if len(devices) < 2:
            return None

        def start():
            import atexit

            model = self.sentence_model(cfg)
            pool = model.start_multi_process_pool(devices)
            atexit.register(model.stop_multi_process_pool, pool)
            return pool

        return self._get(("pool", cfg.model, cfg.device, cfg.max_seq_length), start)

    def nlp(self, cfg):
        from mmf_uvlp.corpus.noun_phrases import load_spacy

        return self._get(("spacy", cfg.spacy_model, tuple(cfg.disable)),
                         lambda: load_spacy(cfg.spacy_model, cfg.disable))

    def glove(self, directory: Optional[str]):
        from mmf_uvlp.corpus.link import GloveVectors

        return self._get(("glove", directory), lambda: GloveVectors(directory))


class _Lock:
    """An exclusive ``flock`` on ``path`` (released by the OS if the process dies)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.handle = None

    def __enter__(self):
        import fcntl

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.handle = open(self.path, "a+")
        fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        import fcntl

        fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
        self.handle.close()


class _Aborter:
    """Test hook: ``MMF_UVLP_CORPUS_ABORT_AFTER=stage:n`` kills the process after n chunks."""

    def __init__(self, hook: Optional[Hook]) -> None:
        self.hook = hook
        self.counts: Dict[str, int] = {}
        spec = os.environ.get(ABORT_ENV, "")
        self.stage, _, n = spec.partition(":")
        self.limit = int(n) if n else None

    def __call__(self, stage: str, chunk: int) -> None:
        self.counts[stage] = self.counts.get(stage, 0) + 1
        if self.hook is not None:
            self.hook(stage, chunk)
        if self.limit is not None and stage == self.stage and self.counts[stage] >= self.limit:
            os._exit(75)


def _index_corpus(config: CorpusConfig, cache_dir: str, rebuild: bool, progress: bool,
                  timings: Optional[Dict[str, Dict[str, float]]]) -> None:
    """``index.bin`` + ``meta.json`` of the corpus in ``cache_dir`` unless there (the
    caller holds the cache's lock). A cache of other inputs/settings is an error, or with
    ``rebuild`` cleared first."""
    fingerprint = config.sentence_fingerprint()
    meta_path = os.path.join(cache_dir, "meta.json")
    meta = read_json(meta_path)
    if meta is not None and meta.get("fingerprint") != fingerprint:
        if not rebuild:
            raise RuntimeError(
                f"{cache_dir} holds sentences of other inputs/settings (fingerprint "
                f"{meta.get('fingerprint')} != {fingerprint}); rerun with --restart to "
                "rebuild it, or use another --sentence-cache")
        clear_sentence_cache(cache_dir)
        meta = None
    if meta is None:
        t0 = _Clock()
        policy = ErrorPolicy(config.run.on_error)
        counts = build_sentence_index(config.inputs.corpus, cache_dir, policy,
                                      progress=progress)
        if counts["sentences"] == 0:
            skipped = dict(policy.counts)
            raise EmptyInputError(
                f"no usable sentences in {', '.join(config.inputs.corpus)}: "
                f"{counts['lines']} lines" + (f", all skipped ({skipped})" if skipped
                                              else "") + "; nothing to retrieve from")
        meta = {"fingerprint": fingerprint, "files": list(config.inputs.corpus),
                "counts": counts, "skipped": policy.to_dict()}
        atomic_write_json(meta_path, meta)
        _add_timing(timings, "sentences_index", t0, counts["lines"], "lines")


def prepare_sentences(
    config: CorpusConfig,
    cache_dir: str,
    resources: Optional[Resources] = None,
    hook: Optional[Hook] = None,
    progress: Optional[bool] = None,
    timings: Optional[Dict[str, Dict[str, float]]] = None,
    rebuild: bool = False,
) -> SentenceStore:
    """Index and embed the text corpus once into ``cache_dir`` (shared by all shards).

    A cache of other inputs/settings is an error, or with ``rebuild`` cleared and rebuilt.
    Chunks already embedded by ``prepare_sentences_part`` jobs are copied, not embedded.
    """
    from mmf_uvlp.corpus.embed import DONE_FILE, embed_corpus

    resources = resources or Resources()
    progress = config.run.progress if progress is None else progress
    aborter = hook if isinstance(hook, _Aborter) else _Aborter(hook)
    with _Lock(os.path.join(cache_dir, ".lock")):
        _index_corpus(config, cache_dir, rebuild, progress, timings)
        store = SentenceStore(cache_dir, config.inputs.corpus)
        if not os.path.exists(os.path.join(cache_dir, DONE_FILE)):
            t0 = _Clock()
            model = resources.sentence_model(config.embed)
            embed_corpus(store, cache_dir, model, config.embed.chunk_size,
                         config.embed.batch_size, progress=progress, hook=aborter,
                         pool=resources.encode_pool(config.embed))
            _add_timing(timings, "sentences_embed", t0, len(store), "sentences")
    return store


def prepare_sentences_part(
    config: CorpusConfig,
    cache_dir: str,
    part: Tuple[int, int],
    resources: Optional[Resources] = None,
    hook: Optional[Hook] = None,
) -> int:
    """Part ``i/N`` of the corpus embedding (chunks ``c % N == i``) into part files of
    ``cache_dir``, for N jobs that share it; the first indexes the corpus (under the cache's
    lock; the others wait for it). ``prepare_sentences`` then assembles the parts. Returns
    the chunks embedded."""
    from mmf_uvlp.corpus.embed import embed_corpus_part

    resources = resources or Resources()
    with _Lock(os.path.join(cache_dir, ".lock")):
        _index_corpus(config, cache_dir, False, False, None)
    store = SentenceStore(cache_dir, config.inputs.corpus)
    return embed_corpus_part(store, cache_dir, resources.sentence_model(config.embed),
                             config.embed.chunk_size, config.embed.batch_size, part,
                             hook=_Aborter(hook), pool=resources.encode_pool(config.embed))


def prepare_index(config: CorpusConfig, cache_dir: str, embeddings: Optional[np.ndarray] = None):
    """The search index over the embedded corpus of ``cache_dir`` (``retrieve.index``;
    ``auto`` by corpus size); an approximate one is saved in the cache on first use and read
    by every later shard."""
    from mmf_uvlp.corpus.embed import load_corpus_embeddings
    from mmf_uvlp.corpus.retrieve import build_index, resolve_index_kind

    cfg = config.retrieve
    if embeddings is None:
        embeddings = load_corpus_embeddings(cache_dir)
    kind = resolve_index_kind(cfg.index, embeddings.shape[0], cfg.exact_max)
    return build_index(embeddings, kind, cfg, cache_dir,
                       deterministic=config.run.deterministic_hnsw)


def clear_sentence_cache(cache_dir: str) -> None:
    """Delete what ``prepare_sentences`` wrote (``meta.json`` last: a cache without it is
    rebuilt, so a clear that is killed half-way is finished by the next one)."""
    from mmf_uvlp.corpus.embed import DONE_FILE, EMBEDDINGS_FILE, PROGRESS_FILE
    from mmf_uvlp.corpus.sentences import HASHES_FILE, INDEX_FILE, META_FILE

    names = [DONE_FILE, PROGRESS_FILE, EMBEDDINGS_FILE, HASHES_FILE, INDEX_FILE]
    paths = [os.path.join(cache_dir, name) for name in names]
    for pattern in ("faiss-*.index", "embeddings.part-*.npy", "*.tmp*"):
        paths += sorted(glob.glob(os.path.join(cache_dir, pattern)))
    for path in paths + [os.path.join(cache_dir, META_FILE)]:
        if os.path.exists(path):
            os.remove(path)


class _Clock:
    """Wall and CPU (all threads of this process) seconds since creation."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.time(), time.process_time()

    def wall(self) -> float:
        return time.time() - self.wall0

    def cpu(self) -> float:
        return time.process_time() - self.cpu0


def _add_timing(timings, name, clock: _Clock, items, unit) -> None:
    if timings is None:
        return
    entry = timings.setdefault(name, {"seconds": 0.0, "cpu_seconds": 0.0, "items": 0,
                                      "unit": unit})
    entry["seconds"] += clock.wall()
    entry["cpu_seconds"] += clock.cpu()
    entry["items"] += items
    entry["rate"] = entry["items"] / entry["seconds"] if entry["seconds"] > 0 else None
    entry["peak_rss_mb"] = round(peak_rss_mb(), 1)


def _chunk_file(directory: str, chunk: int, ext: str) -> str:
    return os.path.join(directory, f"chunk-{chunk:06d}.{ext}")


def _save_npy(path: str, array: np.ndarray) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as handle:
        np.save(handle, array)
    os.replace(tmp, path)


def _round(x: Optional[float], digits: int):
    if x is None:
        return None
    value = round(float(x), digits)
    return 0.0 if value == 0 else value


class CorpusBuilder:
    """Build one shard (or the whole corpus, shard 0/1) into ``out_dir``."""

    def __init__(
        self,
        config: CorpusConfig,
        out_dir: str,
        shard: Tuple[int, int] = (0, 1),
        sentence_cache: Optional[str] = None,
        resources: Optional[Resources] = None,
        hook: Optional[Hook] = None,
    ) -> None:
        self.config = config.validate()
        self.out = out_dir
        self.shard = shard
        self.sentence_cache = sentence_cache or os.path.join(out_dir, "sentences")
        self.resources = resources or Resources()
        self.after_chunk = _Aborter(hook)
        self.work = os.path.join(out_dir, "work")
        self.timings: Dict[str, Dict[str, float]] = {}
        self._store: Optional[SentenceStore] = None
        self._captions = None
        self._objects = None
        self._gt_stats: Dict[str, object] = {}

    # ------------------------------------------------------------------ orchestration
    def run(self, restart: bool = False) -> Dict[str, object]:
        cfg = self.config
        self._set_threads()
        self._check_state(restart)
        det = self.stage_detections()  # cheap checks of the detections before embedding
        self._store = prepare_sentences(cfg, self.sentence_cache, self.resources,
                                        self.after_chunk, cfg.run.progress, self.timings,
                                        rebuild=restart)
        chunks = det["owned"]
        self.stage_queries(chunks, det)
        self.stage_retrieve(chunks, det)
        self.stage_phrases(chunks, det)
        self.stage_link(chunks, det)
        summary = self.finalize(det)
        self._write_timings()
        return summary

    def _set_threads(self) -> None:
        n = self.config.run.num_threads
        if n:
            import faiss
            import torch

            torch.set_num_threads(int(n))
            faiss.omp_set_num_threads(int(n))

    def _check_state(self, restart: bool) -> None:
        own = OUTPUT_FOLDERS
        if os.path.abspath(self.sentence_cache) == os.path.abspath(
                os.path.join(self.out, "sentences")):
            own += ("sentences",)  # the default cache is part of the output
        check_no_links_below(Path(self.out), own, "build_corpus")
        path = os.path.join(self.out, "state.json")
        fingerprint = self.config.shard_fingerprint()
        state = read_json(path)
        if state is not None and restart:
            for name in OUTPUT_FOLDERS:
                shutil.rmtree(os.path.join(self.out, name), ignore_errors=True)
            for name in ("timings.json", "shared.json"):
                if os.path.exists(os.path.join(self.out, name)):
                    os.remove(os.path.join(self.out, name))
            state = None
        if state is not None:
            if state.get("fingerprint") != fingerprint or state.get("shard") != list(self.shard):
                raise RuntimeError(
                    f"{self.out} was built with another config or shard (fingerprint "
                    f"{state.get('fingerprint')}, shard {state.get('shard')}); rerun with "
                    "--restart to discard it, or use another --out")
        os.makedirs(self.out, exist_ok=True)
        for name in OUTPUT_FOLDERS:  # leftovers of a killed run
            for root, _, files in os.walk(os.path.join(self.out, name)):
                for f in files:
                    if ".tmp." in f:
                        os.remove(os.path.join(root, f))
        import yaml

        atomic_write_bytes(os.path.join(self.out, "config.yaml"),
                           yaml.safe_dump(self.config.to_dict(), sort_keys=False).encode())
        atomic_write_json(path, {"fingerprint": fingerprint, "shard": list(self.shard),
                                 "sentence_cache": os.path.abspath(self.sentence_cache),
                                 "stages": STAGES})

    def _progress(self, desc: str, total: Optional[int], unit: str = "img"):
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, disable=not self.config.run.progress,
                    dynamic_ncols=True)

    def _owned_images(self, det: Dict[str, object], chunks: Sequence[int]) -> int:
        return sum(det["images"][str(c)] for c in chunks)

    def _todo(self, stage: str, chunks: Sequence[int], ext: str) -> Tuple[str, List[int]]:
        """The stage's work folder (created) and the chunks it has not finished yet."""
        directory = os.path.join(self.work, stage)
        os.makedirs(directory, exist_ok=True)
        return directory, [c for c in chunks if not os.path.exists(_chunk_file(directory, c, ext))]

    # ------------------------------------------------------------------ stage 1
    def stage_detections(self) -> Dict[str, object]:
        cfg = self.config
        directory = os.path.join(self.work, "detections")
        success = os.path.join(directory, "_SUCCESS.json")
        done = read_json(success)
        if done is not None:
            return done
        os.makedirs(directory, exist_ok=True)
        size = cfg.output.chunk_images
        index, count = self.shard
        finished = {int(os.path.basename(p)[6:12])
                    for p in glob.glob(os.path.join(directory, "chunk-*.json"))}
        reader = DetectionReader(
            predictions=cfg.inputs.predictions, detections_jsonl=cfg.inputs.detections_jsonl,
            features=cfg.inputs.features, feature_dim=cfg.inputs.feature_dim,
            validate_features=cfg.inputs.validate_features,
            box_tolerance=cfg.inputs.box_tolerance, hw=cfg.inputs.hw,
            labelmap=cfg.inputs.labelmap,
        ).select(lambda p: (p // size) % count == index and (p // size) not in finished)
        rule = cfg.tags
        t0 = _Clock()
        bar = self._progress("detections", None)
        current: Optional[int] = None
        images: List[Dict[str, object]] = []
        policy = ErrorPolicy(cfg.run.on_error)
        stats: Dict[str, int] = {}
        rows = 0

        def flush() -> None:
            if current is None:
                return
            stats["images"] = len(images)
            data = {"chunk": current, "stats": dict(stats, skipped=policy.to_dict()),
                    "images": images}
            atomic_write_bytes(_chunk_file(directory, current, "json"),
                               json.dumps(data, separators=(",", ":")).encode())
            self.after_chunk("detections", current)

        last_position = -1
        for position, source, item in reader:
            chunk = position // size
            if chunk != current:
                flush()
                current, images, policy = chunk, [], ErrorPolicy(cfg.run.on_error)
                stats = {"rows": 0, "images": 0, "dropped_no_tags": 0, "regions": 0, "tags": 0,
                         "feature_dim": None}
            if position != last_position:  # a row may come with several errors
                last_position = position
                stats["rows"] += 1
                rows += 1
                bar.update(1)
            if isinstance(item, Exception):
                policy.handle(source, item)
                continue
            tags = ranked_tags(item, rule)
            if not tags and cfg.tags.on_empty == "drop":
                stats["dropped_no_tags"] += 1
                continue
            if item.feature_dim:
                stats["feature_dim"] = item.feature_dim
            stats["regions"] += item.num_boxes
            stats["tags"] += len(tags)
            images.append({
                "position": position,
                "image_id": item.image_id,
                "feature_key": cfg.inputs.feature_key_template.format(image_id=item.image_id),
                "image_w": item.image_w,
                "image_h": item.image_h,
                "tag_query": cfg.tags.separator.join(tags),
                "regions": [{"box": box, "label": label, "conf": conf} for box, label, conf
                            in zip(item.boxes, item.labels, item.confs)],
            })
        flush()
        bar.close()
        total_chunks = math.ceil(reader.positions / size)
        owned = [c for c in range(total_chunks) if c % count == index]
        images_per_chunk, feature_dim = {}, None
        skipped, dropped = ErrorPolicy("skip"), 0
        for c in owned:
            path = _chunk_file(directory, c, "json")
            if not os.path.exists(path):
                raise RuntimeError(f"{path} missing after reading detections (file changed?)")
            with open(path) as handle:
                data = json.load(handle)
            images_per_chunk[str(c)] = len(data["images"])
            feature_dim = feature_dim or data["stats"].get("feature_dim")
            skipped.merge(ErrorPolicy.from_dict(data["stats"]["skipped"]))
            dropped += data["stats"]["dropped_no_tags"]
        if reader.positions == 0 or (count == 1 and not sum(images_per_chunk.values())):
            self._no_images(reader.positions, dict(skipped.counts), dropped)
        done = {"positions": reader.positions, "total_chunks": total_chunks, "owned": owned,
                "images": images_per_chunk, "feature_dim": feature_dim}
        atomic_write_json(success, done)
        _add_timing(self.timings, "detections", t0, rows, "images")
        return done

    def _no_images(self, rows: int, skipped: Dict[str, int], dropped: int) -> None:
        inputs = self.config.inputs
        files = " and ".join(p for p in (inputs.predictions or inputs.detections_jsonl,
                                         inputs.features if inputs.validate_features else None)
                             if p)
        why = "no rows" if rows == 0 else ", ".join(
            [f"{rows} rows"] + ([f"{sum(skipped.values())} skipped {skipped}"] if skipped else [])
            + ([f"{dropped} without tags (tags.*)"] if dropped else []))
        raise EmptyInputError(f"no usable images in {files}: {why}; nothing written")

    def _load_detections(self, chunk: int) -> Dict[str, object]:
        with open(_chunk_file(os.path.join(self.work, "detections"), chunk, "json")) as handle:
            return json.load(handle)

    # ------------------------------------------------------------------ stage 2
    def stage_queries(self, chunks: Sequence[int], det: Dict[str, object]) -> None:
        from mmf_uvlp.corpus.embed import encode

        directory, todo = self._todo("queries", chunks, "npy")
        if not todo:
            return
        model = self.resources.sentence_model(self.config.embed)
        pool = self.resources.encode_pool(self.config.embed)
        t0, n = _Clock(), 0
        bar = self._progress("embed queries", self._owned_images(det, todo))
        for c in todo:
            queries = [im["tag_query"] for im in self._load_detections(c)["images"]]
            _save_npy(_chunk_file(directory, c, "npy"),
                      encode(model, queries, self.config.embed.batch_size, pool))
            n += len(queries)
            bar.update(len(queries))
            self.after_chunk("queries", c)
        bar.close()
        _add_timing(self.timings, "queries", t0, n, "images")

    # ------------------------------------------------------------------ ground truth
    def _shard_image_ids(self, chunks: Sequence[int]) -> set:
        ids = set()
        for c in chunks:
            ids.update(im["image_id"] for im in self._load_detections(c)["images"])
        return ids

    def _ground_truth(self, chunks: Sequence[int]) -> None:
        from mmf_uvlp.corpus.quality import load_captions, load_objects

        if self._captions is not None or self._objects is not None:
            return
        inputs = self.config.inputs
        if not (inputs.captions_gt or inputs.objects_gt):
            self._captions, self._objects = {}, {}
            return
        ids = self._shard_image_ids(chunks)
        policy = ErrorPolicy(self.config.run.on_error)
        self._captions = load_captions(inputs.captions_gt, ids, policy) \
            if inputs.captions_gt else {}
        self._objects = load_objects(inputs.objects_gt, ids, policy) if inputs.objects_gt else {}
        self._gt_stats = {"skipped": policy.to_dict()}
        atomic_write_json(os.path.join(self.work, "ground_truth.json"), self._gt_stats)

    # ------------------------------------------------------------------ stage 3
    def stage_retrieve(self, chunks: Sequence[int], det: Dict[str, object]) -> None:
        from mmf_uvlp.corpus.embed import load_corpus_embeddings
        from mmf_uvlp.corpus.retrieve import (
            ExactSearch, output_recall, recall_sample_size, resolve_index_kind, retrieve,
        )

        cfg = self.config.retrieve
        directory, todo = self._todo("retrieval", chunks, "npz")
        if not todo:
            return
        store = self._store
        embeddings = load_corpus_embeddings(self.sentence_cache)
        hashes = np.asarray(store.hashes)
        kind = resolve_index_kind(cfg.index, len(store), cfg.exact_max)
        sample_size = recall_sample_size(cfg, det["total_chunks"])
        t_build = _Clock()
        index = prepare_index(self.config, self.sentence_cache, embeddings)
        _add_timing(self.timings, "retrieve_index_build", t_build, len(store),
                    "sentences")
        need_gt = cfg.exclude_own_caption or self.config.inputs.captions_gt
        if need_gt:
            self._ground_truth(chunks)
        edges = np.linspace(-1.0, 1.0, cfg.histogram_bins + 1)
        t0, n = _Clock(), 0
        bar = self._progress("retrieve", self._owned_images(det, todo))
        for c in todo:
            images = self._load_detections(c)["images"]
            queries = np.load(_chunk_file(os.path.join(self.work, "queries"), c, "npy"))
            own = [set(self._captions.get(im["image_id"], ())) for im in images] \
                if cfg.exclude_own_caption else None
            ids, scores, dropped = retrieve(index, queries, embeddings, hashes, cfg.k,
                                            cfg.overfetch, own, cfg.unique_texts,
                                            cfg.query_batch_size)
            empty = np.array([not im["tag_query"] for im in images], dtype=bool)
            ids[empty], scores[empty] = -1, np.nan  # tags.on_empty=keep: no query, no sentences
            valid = scores[~np.isnan(scores)]
            stats = {
                "queries": len(images),
                "retrieved": int(valid.size),
                "short": int(np.sum(np.sum(ids >= 0, axis=1) < cfg.k)),
                "own_caption_dropped": int(dropped),
                "histogram": np.histogram(np.clip(valid, -1, 1), bins=edges)[0].tolist(),
                "score_sum": float(np.sum(valid.astype(np.float64))),
                "top1_sum": float(np.nansum(scores[:, 0].astype(np.float64))) if len(images)
                else 0.0,
            }
            rows = np.flatnonzero(~empty)
            if kind != "flat" and sample_size > 0 and rows.size:
                rng = np.random.default_rng([cfg.seed, c])
                sample = np.sort(rng.choice(rows, size=min(rows.size, sample_size),
                                            replace=False))
                _, exact, _ = retrieve(ExactSearch(embeddings), queries[sample], embeddings,
                                       hashes, cfg.k, cfg.overfetch,
                                       [own[i] for i in sample] if own is not None else None,
                                       cfg.unique_texts)
                rec = output_recall(scores[sample], exact)
                stats["recall_sample"] = {"n": int(sample.size), "sum": float(rec.sum())}
            if self.config.inputs.captions_gt:
                stats["gt"] = self._caption_recall(images, ids, hashes)
            atomic_write_json(_chunk_file(directory, c, "json"), stats)
            path = _chunk_file(directory, c, "npz")
            tmp = f"{path}.tmp.{os.getpid()}.npz"
            np.savez(tmp, ids=ids, scores=scores)
            os.replace(tmp, path)
            n += len(images)
            bar.update(len(images))
            self.after_chunk("retrieve", c)
        bar.close()
        _add_timing(self.timings, "retrieve", t0, n, "images")

    def _caption_recall(self, images, ids: np.ndarray, hashes: np.ndarray) -> Dict[str, object]:
        k = ids.shape[1]
        out = {"images_with_caption": 0, "caption_in_pool": 0, "hits": [0] * k}
        for row, im in enumerate(images):
            true = self._captions.get(im["image_id"])
            if not true:
                continue
            out["images_with_caption"] += 1
            if not self._store.in_pool(np.array(true, dtype=np.uint64)).any():
                continue
            out["caption_in_pool"] += 1
            true_set = set(true)
            got = [int(hashes[s]) in true_set if s >= 0 else False for s in ids[row]]
            for r in range(k):
                if any(got[: r + 1]):
                    out["hits"][r] += 1
        return out

    def _load_retrieval(self, chunk: int) -> Tuple[np.ndarray, np.ndarray, Dict[str, object]]:
        directory = os.path.join(self.work, "retrieval")
        with np.load(_chunk_file(directory, chunk, "npz")) as data:
            ids, scores = data["ids"], data["scores"]
        return ids, scores, read_json(_chunk_file(directory, chunk, "json"))

    # ------------------------------------------------------------------ stage 4
    def stage_phrases(self, chunks: Sequence[int], det: Dict[str, object]) -> None:
        from mmf_uvlp.corpus.noun_phrases import PhraseExtractor, phrase_processes

        cfg = self.config.phrases
        directory, todo = self._todo("phrases", chunks, "jsonl")
        if not todo:
            return
        extractor = PhraseExtractor(self.resources.nlp(cfg), cfg.batch_size, cfg.cache_size)
        processes = phrase_processes(cfg.n_process,
                                     self._owned_images(det, todo) * self.config.retrieve.k,
                                     self.config.run.num_threads)
        t0, n = _Clock(), 0
        bar = self._progress("noun phrases", None, unit="sent")
        sentences: Dict[int, Tuple[List[int], List[str]]] = {}  # chunks fed, not yet written

        def groups():
            for c in todo:
                ids, _, _ = self._load_retrieval(c)
                distinct = np.unique(ids[ids >= 0]).tolist()
                sentences[c] = (distinct, self._store.texts(distinct))
                yield c, *sentences[c]

        for c, phrases in extractor.stream(groups(), processes):
            distinct, texts = sentences.pop(c)
            lines = [json.dumps({"sentence_id": sid, "text": text, "phrases": ph},
                                ensure_ascii=False, separators=(",", ":"))
                     for sid, text, ph in zip(distinct, texts, phrases)]
            atomic_write_bytes(_chunk_file(directory, c, "jsonl"),
                               ("\n".join(lines) + "\n" if lines else "").encode("utf-8"))
            n += len(distinct)
            bar.update(len(distinct))
            self.after_chunk("phrases", c)
        bar.close()
        _add_timing(self.timings, "phrases", t0, n, "sentences")

    # ------------------------------------------------------------------ stage 5
    def _linker(self):
        from mmf_uvlp.corpus.link import Linker

        cfg = self.config.link
        if cfg.method == "glove":
            return Linker.from_config(cfg, glove=self.resources.glove(cfg.glove_dir))
        return Linker.from_config(cfg, sbert_model=self.resources.sentence_model(self.config.embed))

    def stage_link(self, chunks: Sequence[int], det: Dict[str, object]) -> None:
        from mmf_uvlp.corpus.quality import mentions
        from mmf_uvlp.corpus.shards import part_name, write_part

        cfg = self.config
        ann_dir = os.path.join(self.out, "annotations")
        stats_dir = os.path.join(self.out, "stats")
        os.makedirs(ann_dir, exist_ok=True)
        os.makedirs(stats_dir, exist_ok=True)
        todo = [c for c in chunks
                if not os.path.exists(os.path.join(ann_dir, part_name(c, cfg.output.format)))]
        if not todo:
            return
        if cfg.inputs.objects_gt:
            self._ground_truth(chunks)
        linker = self._linker()
        digits = cfg.output.float_digits
        t0, n = _Clock(), 0
        bar = self._progress("link + write", self._owned_images(det, todo))
        for c in todo:
            detections = self._load_detections(c)
            ids, scores, rstats = self._load_retrieval(c)
            sentences = {}
            with open(_chunk_file(os.path.join(self.work, "phrases"), c, "jsonl"),
                      encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        item = json.loads(line)
                        sentences[item["sentence_id"]] = item
            linker.precompute([p["text"] for s in sentences.values() for p in s["phrases"]])
            lstats = {"sentences": 0, "phrases": 0, "linked": 0, "no_vector": 0,
                      "mention": 0, "gt_linked": 0, "gt_grounded": 0, "gt_correct": 0}
            records = []
            for row, im in enumerate(detections["images"]):
                regions = im["regions"]
                labels = [r["label"] for r in regions]
                confs = [r["conf"] for r in regions]
                candidates = [i for i, r in enumerate(regions)
                              if r["conf"] >= cfg.link.region_min_conf]
                true = self._objects.get(im["image_id"]) if self._objects else None
                out_sentences = []
                for rank in range(ids.shape[1]):
                    sid = int(ids[row, rank])
                    if sid < 0:
                        continue
                    sent = sentences[sid]
                    out_phrases = []
                    for ph in sent["phrases"]:
                        region, sim, score, linked = linker.link(ph, labels, confs, candidates)
                        lstats["phrases"] += 1
                        lstats["no_vector"] += int(sim is None)
                        if linked:
                            lstats["linked"] += 1
                            label = labels[region].lower()
                            mentioned = mentions(ph["text"], label)
                            lstats["mention"] += int(mentioned)
                            if true is not None:
                                correct = int(label in true and mentioned)
                                band = link_score_band(score)
                                lstats["gt_linked"] += 1
                                lstats["gt_grounded"] += int(label in true)
                                lstats["gt_correct"] += correct
                                lstats[f"gt_linked@{band}"] = lstats.get(f"gt_linked@{band}", 0) + 1
                                lstats[f"gt_correct@{band}"] = (lstats.get(f"gt_correct@{band}", 0)
                                                                + correct)
                        out_phrases.append({
                            "text": ph["text"], "char_span": ph["char_span"],
                            "token_span": ph["token_span"], "region": region,
                            "similarity": _round(sim, digits),
                            "link_score": _round(score, digits), "linked": bool(linked),
                        })
                    lstats["sentences"] += 1
                    out_sentences.append({
                        "rank": rank, "sentence_id": sid, "text": sent["text"],
                        "score": _round(scores[row, rank], digits),
                        "noun_phrases": out_phrases,
                    })
                records.append({
                    "image_id": im["image_id"], "feature_key": im["feature_key"],
                    "position": im["position"],
                    "image_w": _round(im["image_w"], 4), "image_h": _round(im["image_h"], 4),
                    "tag_query": im["tag_query"],
                    "regions": [{"box": [_round(v, 4) for v in r["box"]], "label": r["label"],
                                 "conf": _round(r["conf"], digits)} for r in regions],
                    "sentences": out_sentences,
                })
            chunk_stats = {"chunk": c, "detections": detections["stats"],
                           "retrieval": rstats, "link": lstats}
            atomic_write_json(os.path.join(stats_dir, f"chunk-{c:06d}.json"), chunk_stats)
            write_part(ann_dir, c, records, cfg.output.format)
            n += len(records)
            bar.update(len(records))
            self.after_chunk("link", c)
        bar.close()
        _add_timing(self.timings, "link_write", t0, n, "images")

    # ------------------------------------------------------------------ finalize
    def finalize(self, det: Dict[str, object]) -> Dict[str, object]:
        from mmf_uvlp.corpus.report import write_report
        from mmf_uvlp.corpus.shards import part_name, write_index

        cfg = self.config
        index, count = self.shard
        meta = self.output_meta(det)
        ann_dir = os.path.join(self.out, "annotations")
        parts = [{"file": part_name(c, cfg.output.format), "chunk": c,
                  "images": det["images"][str(c)]} for c in det["owned"]]
        if count > 1:
            meta = dict(meta, shard=f"{index}/{count}", complete=False)
        write_index(ann_dir, parts, meta)
        shared = {"sentences": read_json(os.path.join(self.sentence_cache, "meta.json")),
                  "ground_truth": read_json(os.path.join(self.work, "ground_truth.json"), {}),
                  "detections": {"positions": det["positions"], "feature_dim":
                                 det["feature_dim"]}}
        atomic_write_json(os.path.join(self.out, "shared.json"), shared)
        if count == 1:
            return write_report(self.out, cfg, meta, shared, self._store)
        return {"shard": f"{index}/{count}", "parts": len(parts),
                "images": sum(p["images"] for p in parts)}

    def output_meta(self, det: Dict[str, object]) -> Dict[str, object]:
        cfg = self.config
        return {"format": cfg.output.format, "chunk_images": cfg.output.chunk_images,
                "total_chunks": det["total_chunks"], "fingerprint": cfg.shard_fingerprint(),
                "k": cfg.retrieve.k, "complete": True}

    def _write_timings(self) -> None:
        """Add this process's timings to those of earlier (interrupted) runs of this OUT."""
        path = os.path.join(self.out, "timings.json")
        old = read_json(path, {"stages": {}, "peak_rss_mb": 0.0})
        stages = old["stages"]
        for name, t in self.timings.items():
            entry = stages.setdefault(name, {"seconds": 0.0, "cpu_seconds": 0.0, "items": 0,
                                             "unit": t["unit"]})
            entry["seconds"] += t["seconds"]
            entry["cpu_seconds"] = entry.get("cpu_seconds", 0.0) + t["cpu_seconds"]
            entry["items"] += t["items"]
            entry["rate"] = entry["items"] / entry["seconds"] if entry["seconds"] > 0 else None
            entry["peak_rss_mb"] = max(entry.get("peak_rss_mb", 0.0), t["peak_rss_mb"])
        atomic_write_json(path, {"stages": stages,
                                 "peak_rss_mb": max(old["peak_rss_mb"], round(peak_rss_mb(), 1))})


def build(config: CorpusConfig, out_dir: str, shard: Tuple[int, int] = (0, 1),
          sentence_cache: Optional[str] = None, resources: Optional[Resources] = None,
          hook: Optional[Hook] = None, restart: bool = False) -> Dict[str, object]:
    """Build (or resume) the corpus for one shard; see ``CorpusBuilder``."""
    return CorpusBuilder(config, out_dir, shard, sentence_cache, resources, hook).run(restart)


def merge(shard_dirs: Sequence[str], out_dir: str, config: Optional[CorpusConfig] = None,
          sentence_cache: Optional[str] = None) -> Dict[str, object]:
    """Combine finished shard outputs into one output equal to a single run's."""
    from mmf_uvlp.corpus.config import config_from_dict
    from mmf_uvlp.corpus.report import write_report
    from mmf_uvlp.corpus.shards import copy_file, part_name, write_index

    states, indexes = [], []
    for d in shard_dirs:
        state = read_json(os.path.join(d, "state.json"))
        index = read_json(os.path.join(d, "annotations", "index.json"))
        if state is None or index is None:
            raise RuntimeError(f"{d}: not a finished shard output (no state.json / index.json)")
        states.append(state)
        indexes.append(index)
    fingerprints = {s["fingerprint"] for s in states}
    if len(fingerprints) != 1:
        raise RuntimeError(f"shards were built with different configs: {sorted(fingerprints)}")
    counts = {s["shard"][1] for s in states}
    got = sorted(s["shard"][0] for s in states)
    if len(counts) != 1 or got != list(range(next(iter(counts)))):
        raise RuntimeError(f"need each shard 0..N-1 exactly once, got {[s['shard'] for s in states]}")
    first = indexes[0]
    total = first["total_chunks"]
    fmt = first["format"]
    chunk_dirs: Dict[int, Tuple[str, Dict[str, object]]] = {}
    for d, index in zip(shard_dirs, indexes):
        for part in index["parts"]:
            chunk_dirs[part["chunk"]] = (d, part)
    if sorted(chunk_dirs) != list(range(total)):
        raise RuntimeError(f"merged shards cover chunks {sorted(chunk_dirs)}, expected 0..{total - 1}")
    if not sum(int(part["images"]) for _, part in chunk_dirs.values()):
        raise EmptyInputError(f"no usable images in the shards {', '.join(shard_dirs)}: every "
                              "row was skipped or dropped (see their stats/); nothing written")
    check_no_links_below(Path(out_dir), OUTPUT_FOLDERS, "build_corpus merge")
    ann_dir = os.path.join(out_dir, "annotations")
    stats_dir = os.path.join(out_dir, "stats")
    os.makedirs(ann_dir, exist_ok=True)
    os.makedirs(stats_dir, exist_ok=True)
    parts = []
    for c in range(total):
        d, part = chunk_dirs[c]
        copy_file(os.path.join(d, "annotations", part_name(c, fmt)),
                  os.path.join(ann_dir, part_name(c, fmt)))
        copy_file(os.path.join(d, "stats", f"chunk-{c:06d}.json"),
                  os.path.join(stats_dir, f"chunk-{c:06d}.json"))
        parts.append({"file": part_name(c, fmt), "chunk": c, "images": part["images"]})
    meta = {k: v for k, v in first.items()
            if k not in ("parts", "images", "schema_version", "shard", "complete")}
    meta["complete"] = True
    write_index(ann_dir, parts, meta)
    if config is None:
        import yaml

        with open(os.path.join(shard_dirs[0], "config.yaml")) as handle:
            config = config_from_dict(yaml.safe_load(handle))
    shared = read_json(os.path.join(shard_dirs[0], "shared.json"))
    positions = {read_json(os.path.join(d, "shared.json"))["detections"]["positions"]
                 for d in shard_dirs}
    if len(positions) != 1:
        raise RuntimeError(f"shards read detection files of different lengths: {positions}")
    store = None
    cache = sentence_cache or states[0].get("sentence_cache")
    if cache and os.path.exists(os.path.join(cache, "index.bin")):
        store = SentenceStore(cache, config.inputs.corpus)
    import yaml

    atomic_write_bytes(os.path.join(out_dir, "config.yaml"),
                       yaml.safe_dump(config.to_dict(), sort_keys=False).encode())
    atomic_write_json(os.path.join(out_dir, "shared.json"), shared)
    return write_report(out_dir, config, meta, shared, store)
