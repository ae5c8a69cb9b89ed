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

This module orchestrates (``CorpusBuilder.run``, ``merge``, the shared sentence cache); each
stage's body lives in its module: ``detections.stage_detections``, ``embed.stage_queries``,
``retrieve.stage_retrieve``, ``noun_phrases.stage_phrases``, ``link.stage_link``, with the
chunk files and timings of ``work.py``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from filelock import FileLock

from mmf_uvlp.corpus.config import CorpusConfig
from mmf_uvlp.corpus.detections import stage_detections
from mmf_uvlp.corpus.embed import stage_queries
from mmf_uvlp.corpus.link import stage_link
from mmf_uvlp.corpus.noun_phrases import stage_phrases
from mmf_uvlp.corpus.retrieve import stage_retrieve
from mmf_uvlp.corpus.sentences import SentenceStore, build_sentence_index, read_json
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file, peak_rss_mb
from mmf_uvlp.errors import EmptyInputError
from mmf_uvlp.utils.atomic import atomic_write_bytes, atomic_write_json
from mmf_uvlp.utils.error_policy import ErrorPolicy
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
        return self._get(
            key,
            lambda: load_sentence_model(
                cfg.model, resolve_devices(cfg.device)[0], cfg.allow_download, cfg.max_seq_length
            ),
        )

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

        return self._get(
            ("spacy", cfg.spacy_model, tuple(cfg.disable)),
            lambda: load_spacy(cfg.spacy_model, cfg.disable),
        )

    def glove(self, directory: Optional[str]):
        from mmf_uvlp.corpus.link import GloveVectors

        return self._get(("glove", directory), lambda: GloveVectors(directory))


def _cache_lock(cache_dir: str) -> FileLock:
    """The exclusive lock of a shared corpus cache (``cache_dir/.lock``, an ``flock`` the OS
    releases if the process dies)."""
    os.makedirs(cache_dir, exist_ok=True)
    return FileLock(os.path.join(cache_dir, ".lock"))


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


def _index_corpus(
    config: CorpusConfig,
    cache_dir: str,
    rebuild: bool,
    progress: bool,
    timings: Optional[Dict[str, Dict[str, float]]],
) -> None:
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
                "rebuild it, or use another --sentence-cache"
            )
        clear_sentence_cache(cache_dir)
        meta = None
    if meta is None:
        clock = Clock()
        policy = ErrorPolicy(config.run.on_error)
        counts = build_sentence_index(config.inputs.corpus, cache_dir, policy, progress=progress)
        if counts["sentences"] == 0:
            skipped = dict(policy.counts)
            raise EmptyInputError(
                f"no usable sentences in {', '.join(config.inputs.corpus)}: "
                f"{counts['lines']} lines"
                + (f", all skipped ({skipped})" if skipped else "")
                + "; nothing to retrieve from"
            )
        meta = {
            "fingerprint": fingerprint,
            "files": list(config.inputs.corpus),
            "counts": counts,
            "skipped": policy.to_dict(),
        }
        atomic_write_json(meta_path, meta)
        add_timing(timings, "sentences_index", clock, counts["lines"], "lines")


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
    with _cache_lock(cache_dir):
        _index_corpus(config, cache_dir, rebuild, progress, timings)
        store = SentenceStore(cache_dir, config.inputs.corpus)
        if not os.path.exists(os.path.join(cache_dir, DONE_FILE)):
            clock = Clock()
            model = resources.sentence_model(config.embed)
            embed_corpus(
                store,
                cache_dir,
                model,
                config.embed.chunk_size,
                config.embed.batch_size,
                progress=progress,
                hook=aborter,
                pool=resources.encode_pool(config.embed),
            )
            add_timing(timings, "sentences_embed", clock, len(store), "sentences")
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
    with _cache_lock(cache_dir):
        _index_corpus(config, cache_dir, False, False, None)
    store = SentenceStore(cache_dir, config.inputs.corpus)
    return embed_corpus_part(
        store,
        cache_dir,
        resources.sentence_model(config.embed),
        config.embed.chunk_size,
        config.embed.batch_size,
        part,
        hook=_Aborter(hook),
        pool=resources.encode_pool(config.embed),
    )


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
    return build_index(
        embeddings, kind, cfg, cache_dir, deterministic=config.run.deterministic_hnsw
    )


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
        self.store: Optional[SentenceStore] = None  # the sentence cache, once prepared
        self.captions: Optional[Dict[str, List[int]]] = None  # ground truth: see ground_truth
        self.objects: Optional[Dict[str, Set[str]]] = None

    # ------------------------------------------------------------------ orchestration
    def run(self, restart: bool = False) -> Dict[str, object]:
        """Every stage in turn (each skips the chunks it finished), then the outputs."""
        config = self.config
        self._set_threads()
        self._check_state(restart)
        detected = stage_detections(self)  # cheap checks of the detections before embedding
        self.store = prepare_sentences(
            config,
            self.sentence_cache,
            self.resources,
            self.after_chunk,
            config.run.progress,
            self.timings,
            rebuild=restart,
        )
        chunks = detected["owned"]
        stage_queries(self, chunks, detected)
        stage_retrieve(self, chunks, detected)
        stage_phrases(self, chunks, detected)
        stage_link(self, chunks, detected)
        summary = self.finalize(detected)
        self._write_timings()
        return summary

    def _set_threads(self) -> None:
        threads = self.config.run.num_threads
        if threads:
            import faiss
            import torch

            torch.set_num_threads(int(threads))
            faiss.omp_set_num_threads(int(threads))

    def _check_state(self, restart: bool) -> None:
        own = OUTPUT_FOLDERS
        if os.path.abspath(self.sentence_cache) == os.path.abspath(
            os.path.join(self.out, "sentences")
        ):
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
                    "--restart to discard it, or use another --out"
                )
        os.makedirs(self.out, exist_ok=True)
        for name in OUTPUT_FOLDERS:  # leftovers of a killed run
            for root, _, files in os.walk(os.path.join(self.out, name)):
                for file_name in files:
                    if ".tmp." in file_name:
                        os.remove(os.path.join(root, file_name))
        import yaml

        atomic_write_bytes(
            os.path.join(self.out, "config.yaml"),
            yaml.safe_dump(self.config.to_dict(), sort_keys=False).encode(),
        )
        atomic_write_json(
            path,
            {
                "fingerprint": fingerprint,
                "shard": list(self.shard),
                "sentence_cache": os.path.abspath(self.sentence_cache),
                "stages": STAGES,
            },
        )

    def progress(self, description: str, total: Optional[int], unit: str = "img"):
        """A tqdm bar of a stage (hidden unless ``run.progress``)."""
        from tqdm import tqdm

        return tqdm(
            total=total,
            desc=description,
            unit=unit,
            disable=not self.config.run.progress,
            dynamic_ncols=True,
        )

    def owned_images(self, detected: Dict[str, object], chunks: Sequence[int]) -> int:
        """The images of ``chunks`` (``detected``: the detections stage's summary)."""
        return sum(detected["images"][str(chunk)] for chunk in chunks)

    def todo(self, stage: str, chunks: Sequence[int], extension: str) -> Tuple[str, List[int]]:
        """The stage's work folder (created) and the chunks it has not finished yet."""
        directory = os.path.join(self.work, stage)
        os.makedirs(directory, exist_ok=True)
        return directory, [
            chunk for chunk in chunks if not os.path.exists(chunk_file(directory, chunk, extension))
        ]

    def load_detections(self, chunk: int) -> Dict[str, object]:
        """The images (regions, tag query) and stats of ``chunk`` of the detections stage."""
        with open(chunk_file(os.path.join(self.work, "detections"), chunk, "json")) as handle:
            return json.load(handle)

    def load_retrieval(self, chunk: int) -> Tuple[np.ndarray, np.ndarray, Dict[str, object]]:
        """Sentence ids, scores and stats of ``chunk`` of the retrieve stage."""
        directory = os.path.join(self.work, "retrieval")
        with np.load(chunk_file(directory, chunk, "npz")) as data:
            ids, scores = data["ids"], data["scores"]
        return ids, scores, read_json(chunk_file(directory, chunk, "json"))

    def sentence_index(self, embeddings: np.ndarray):
        """The search index over the sentence cache (built once, then read)."""
        return prepare_index(self.config, self.sentence_cache, embeddings)

    # ------------------------------------------------------------------ ground truth
    def _shard_image_ids(self, chunks: Sequence[int]) -> set:
        ids = set()
        for chunk in chunks:
            ids.update(image["image_id"] for image in self.load_detections(chunk)["images"])
        return ids

    def ground_truth(self, chunks: Sequence[int]) -> None:
        """Read the true captions and objects of the shard's images once (``captions``,
        ``objects``: empty without ``inputs.captions_gt`` / ``inputs.objects_gt``)."""
        from mmf_uvlp.corpus.quality import load_captions, load_objects

        if self.captions is not None or self.objects is not None:
            return
        inputs = self.config.inputs
        if not (inputs.captions_gt or inputs.objects_gt):
            self.captions, self.objects = {}, {}
            return
        ids = self._shard_image_ids(chunks)
        policy = ErrorPolicy(self.config.run.on_error)
        self.captions = load_captions(inputs.captions_gt, ids, policy) if inputs.captions_gt else {}
        self.objects = load_objects(inputs.objects_gt, ids, policy) if inputs.objects_gt else {}
        atomic_write_json(
            os.path.join(self.work, "ground_truth.json"), {"skipped": policy.to_dict()}
        )

    # ------------------------------------------------------------------ finalize
    def finalize(self, detected: Dict[str, object]) -> Dict[str, object]:
        """``annotations/index.json``, ``shared.json`` and (whole corpus) the report."""
        from mmf_uvlp.corpus.report import write_report
        from mmf_uvlp.corpus.shards import part_name, write_index

        config = self.config
        index, count = self.shard
        meta = self.output_meta(detected)
        annotations = os.path.join(self.out, "annotations")
        parts = []
        for chunk in detected["owned"]:
            name = part_name(chunk, config.output.format)
            parts.append(
                {
                    "file": name,
                    "chunk": chunk,
                    "images": detected["images"][str(chunk)],
                    "bytes": os.path.getsize(os.path.join(annotations, name)),
                }
            )
        if count > 1:
            meta = dict(meta, shard=f"{index}/{count}", complete=False)
        write_index(annotations, parts, meta)
        shared = {
            "sentences": read_json(os.path.join(self.sentence_cache, "meta.json")),
            "ground_truth": read_json(os.path.join(self.work, "ground_truth.json"), {}),
            "detections": {
                "positions": detected["positions"],
                "feature_dim": detected["feature_dim"],
            },
        }
        atomic_write_json(os.path.join(self.out, "shared.json"), shared)
        if count == 1:
            return write_report(self.out, config, meta, shared, self.store)
        return {
            "shard": f"{index}/{count}",
            "parts": len(parts),
            "images": sum(part["images"] for part in parts),
        }

    def output_meta(self, detected: Dict[str, object]) -> Dict[str, object]:
        """The fields of ``annotations/index.json`` besides its parts."""
        config = self.config
        return {
            "format": config.output.format,
            "chunk_images": config.output.chunk_images,
            "total_chunks": detected["total_chunks"],
            "fingerprint": config.shard_fingerprint(),
            "k": config.retrieve.k,
            "complete": True,
        }

    def _write_timings(self) -> None:
        """Add this process's timings to those of earlier (interrupted) runs of this OUT."""
        path = os.path.join(self.out, "timings.json")
        old = read_json(path, {"stages": {}, "peak_rss_mb": 0.0})
        stages = old["stages"]
        for name, t in self.timings.items():
            entry = stages.setdefault(
                name, {"seconds": 0.0, "cpu_seconds": 0.0, "items": 0, "unit": t["unit"]}
            )
            entry["seconds"] += t["seconds"]
            entry["cpu_seconds"] = entry.get("cpu_seconds", 0.0) + t["cpu_seconds"]
            entry["items"] += t["items"]
            entry["rate"] = entry["items"] / entry["seconds"] if entry["seconds"] > 0 else None
            entry["peak_rss_mb"] = max(entry.get("peak_rss_mb", 0.0), t["peak_rss_mb"])
        atomic_write_json(
            path,
            {"stages": stages, "peak_rss_mb": max(old["peak_rss_mb"], round(peak_rss_mb(), 1))},
        )


def build(
    config: CorpusConfig,
    out_dir: str,
    shard: Tuple[int, int] = (0, 1),
    sentence_cache: Optional[str] = None,
    resources: Optional[Resources] = None,
    hook: Optional[Hook] = None,
    restart: bool = False,
) -> Dict[str, object]:
    """Build (or resume) the corpus for one shard; see ``CorpusBuilder``."""
    return CorpusBuilder(config, out_dir, shard, sentence_cache, resources, hook).run(restart)


def merge(
    shard_dirs: Sequence[str],
    out_dir: str,
    config: Optional[CorpusConfig] = None,
    sentence_cache: Optional[str] = None,
) -> Dict[str, object]:
    """Combine finished shard outputs into one output equal to a single run's."""
    from mmf_uvlp.corpus.config import config_from_dict
    from mmf_uvlp.corpus.report import write_report
    from mmf_uvlp.corpus.shards import copy_file, part_damage, part_name, write_index

    states, indexes = [], []
    for shard_dir in shard_dirs:
        state = read_json(os.path.join(shard_dir, "state.json"))
        index = read_json(os.path.join(shard_dir, "annotations", "index.json"))
        if state is None or index is None:
            raise RuntimeError(
                f"{shard_dir}: not a finished shard output (no state.json / index.json)"
            )
        states.append(state)
        indexes.append(index)
    fingerprints = {s["fingerprint"] for s in states}
    if len(fingerprints) != 1:
        raise RuntimeError(f"shards were built with different configs: {sorted(fingerprints)}")
    counts = {s["shard"][1] for s in states}
    got = sorted(s["shard"][0] for s in states)
    if len(counts) != 1 or got != list(range(next(iter(counts)))):
        raise RuntimeError(
            f"need each shard 0..N-1 exactly once, got {[s['shard'] for s in states]}"
        )
    first = indexes[0]
    total = first["total_chunks"]
    output_format = first["format"]
    chunk_dirs: Dict[int, Tuple[str, Dict[str, object]]] = {}
    for shard_dir, index in zip(shard_dirs, indexes):
        for part in index["parts"]:
            chunk_dirs[part["chunk"]] = (shard_dir, part)
    if sorted(chunk_dirs) != list(range(total)):
        raise RuntimeError(
            f"merged shards cover chunks {sorted(chunk_dirs)}, expected 0..{total - 1}"
        )
    if not sum(int(part["images"]) for _, part in chunk_dirs.values()):
        raise EmptyInputError(
            f"no usable images in the shards {', '.join(shard_dirs)}: every "
            "row was skipped or dropped (see their stats/); nothing written"
        )
    check_no_links_below(Path(out_dir), OUTPUT_FOLDERS, "build_corpus merge")
    annotations = os.path.join(out_dir, "annotations")
    stats_dir = os.path.join(out_dir, "stats")
    os.makedirs(annotations, exist_ok=True)
    os.makedirs(stats_dir, exist_ok=True)
    parts = []
    for chunk in range(total):
        shard_dir, part = chunk_dirs[chunk]
        name = part_name(chunk, output_format)
        source = os.path.join(shard_dir, "annotations", name)
        damage = part_damage(source, int(part["images"]), part.get("bytes"))
        if damage is not None:
            raise RuntimeError(
                f"{damage}; run that shard's build again (`build_corpus.py run "
                f"--shard ...` into {shard_dir}, or the same launch) to rebuild "
                "it, then merge"
            )
        copy_file(source, os.path.join(annotations, name))
        copy_file(
            os.path.join(shard_dir, "stats", f"chunk-{chunk:06d}.json"),
            os.path.join(stats_dir, f"chunk-{chunk:06d}.json"),
        )
        parts.append(
            {
                "file": name,
                "chunk": chunk,
                "images": part["images"],
                "bytes": os.path.getsize(os.path.join(annotations, name)),
            }
        )
    meta = {
        key: value
        for key, value in first.items()
        if key not in ("parts", "images", "schema_version", "shard", "complete")
    }
    meta["complete"] = True
    write_index(annotations, parts, meta)
    if config is None:
        import yaml

        with open(os.path.join(shard_dirs[0], "config.yaml")) as handle:
            config = config_from_dict(yaml.safe_load(handle))
    shared = read_json(os.path.join(shard_dirs[0], "shared.json"))
    positions = {
        read_json(os.path.join(shard_dir, "shared.json"))["detections"]["positions"]
        for shard_dir in shard_dirs
    }
    if len(positions) != 1:
        raise RuntimeError(f"shards read detection files of different lengths: {positions}")
    store = None
    cache = sentence_cache or states[0].get("sentence_cache")
    if cache and os.path.exists(os.path.join(cache, "index.bin")):
        store = SentenceStore(cache, config.inputs.corpus)
    import yaml

    atomic_write_bytes(
        os.path.join(out_dir, "config.yaml"),
        yaml.safe_dump(config.to_dict(), sort_keys=False).encode(),
    )
    atomic_write_json(os.path.join(out_dir, "shared.json"), shared)
    return write_report(out_dir, config, meta, shared, store)
