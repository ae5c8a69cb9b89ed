"""The stages at scale: the corpus embedding in parts (one per job) assembled to one process's
bytes, the encoder's devices, the noun phrases of many chunks through one spaCy pipe, and how
many spaCy processes a stage starts."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest

from mmf_uvlp.utils.error_policy import ErrorPolicy

from helpers.corpus import SENTENCES, shared_resources, write_tiny_world


def _store(paths, folder):
    from mmf_uvlp.corpus.sentences import SentenceStore, build_sentence_index

    build_sentence_index([paths["corpus"]], str(folder), ErrorPolicy())
    return SentenceStore(str(folder), [paths["corpus"]])


def test_the_embedding_in_parts_assembles_to_the_bytes_of_one_process(tmp_path):
    from mmf_uvlp.corpus.config import EmbedConfig
    from mmf_uvlp.corpus.embed import (
        EMBEDDINGS_FILE,
        embed_corpus,
        embed_corpus_part,
        part_file,
    )

    paths = write_tiny_world(tmp_path / "world")
    model = shared_resources().sentence_model(EmbedConfig())
    whole = _store(paths, tmp_path / "whole")
    embed_corpus(whole, str(tmp_path / "whole"), model, chunk_size=5, batch_size=4)
    parts = _store(paths, tmp_path / "parts")  # 12 sentences: chunks 0, 1, 2
    calls = []
    assert (
        embed_corpus_part(
            parts,
            str(tmp_path / "parts"),
            model,
            5,
            4,
            (0, 2),
            hook=lambda stage, c: calls.append(c),
        )
        == 2
    )
    assert calls == [0, 2]
    assert embed_corpus_part(parts, str(tmp_path / "parts"), model, 5, 4, (0, 2)) == 0  # done
    assert sorted(os.listdir(tmp_path / "parts")) >= [
        os.path.basename(part_file("", 0)),
        os.path.basename(part_file("", 2)),
    ]
    with mock.patch(
        "mmf_uvlp.corpus.embed.encode",
        wraps=__import__("mmf_uvlp.corpus.embed", fromlist=["encode"]).encode,
    ) as encode:
        embed_corpus(parts, str(tmp_path / "parts"), model, chunk_size=5, batch_size=4)
    assert encode.call_count == 1  # only chunk 1 (part 1/2 never ran): the others copied
    assert (tmp_path / "parts" / EMBEDDINGS_FILE).read_bytes() == (
        tmp_path / "whole" / EMBEDDINGS_FILE
    ).read_bytes()
    assert not list((tmp_path / "parts").glob("embeddings.part-*"))  # assembled, removed


def test_a_part_of_the_wrong_shape_is_refused_naming_it(tmp_path):
    from mmf_uvlp.corpus.config import EmbedConfig
    from mmf_uvlp.corpus.embed import embed_corpus, part_file

    paths = write_tiny_world(tmp_path / "world")
    store = _store(paths, tmp_path / "s")
    np.save(part_file(str(tmp_path / "s"), 1), np.zeros((4, 384), np.float32))
    model = shared_resources().sentence_model(EmbedConfig())
    with pytest.raises(
        RuntimeError,
        match=r"embeddings.part-000001.npy: shape \(4, 384\), "
        r"expected \(5, 384\)",
    ):
        embed_corpus(store, str(tmp_path / "s"), model, chunk_size=5, batch_size=4)


def test_the_encoder_runs_on_every_visible_gpu_else_the_cpu():
    from mmf_uvlp.corpus.embed import resolve_devices

    with mock.patch("torch.cuda.is_available", return_value=False):
        assert resolve_devices("auto") == ["cpu"]
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=1),
    ):
        assert resolve_devices("auto") == ["cuda:0"]
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=3),
    ):
        assert resolve_devices("auto") == ["cuda:0", "cuda:1", "cuda:2"]
    assert resolve_devices("cpu") == ["cpu"]
    assert resolve_devices("cuda:0, cuda:1") == ["cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match="embed.device"):
        resolve_devices(" , ")


def test_several_gpus_encode_through_sentence_transformers_pool():
    from mmf_uvlp.corpus.config import EmbedConfig
    from mmf_uvlp.corpus.embed import encode
    from mmf_uvlp.corpus.pipeline import Resources

    resources = Resources()
    fake = mock.MagicMock()
    fake.start_multi_process_pool.return_value = "the pool"
    fake.encode.return_value = np.ones((2, 3), np.float32)
    resources._cache[("sbert", None, "cuda:0,cuda:1", None)] = fake
    pool = resources.encode_pool(EmbedConfig(device="cuda:0,cuda:1"))
    assert pool == "the pool"
    fake.start_multi_process_pool.assert_called_once_with(["cuda:0", "cuda:1"])
    assert resources.encode_pool(EmbedConfig(device="cuda:0,cuda:1")) is pool  # started once
    assert resources.encode_pool(EmbedConfig(device="cpu")) is None
    out = encode(fake, ["a", "b"], 4, pool)
    assert fake.encode.call_args.kwargs["pool"] == "the pool"
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def test_phrases_of_many_chunks_through_one_pipe_equal_those_of_one_call_per_chunk():
    from mmf_uvlp.corpus.config import PhrasesConfig
    from mmf_uvlp.corpus.noun_phrases import PhraseExtractor

    nlp = shared_resources().nlp(PhrasesConfig())
    groups = [
        ("c0", [0, 1, 2], SENTENCES[0:3]),
        ("c1", [], []),
        ("c2", [1, 3, 4], [SENTENCES[1], SENTENCES[3], SENTENCES[4]]),
        ("c3", [2, 4], [SENTENCES[2], SENTENCES[4]]),
    ]  # repeats across chunks
    one_by_one = PhraseExtractor(nlp, batch_size=2)
    want = [(key, one_by_one(ids, texts)) for key, ids, texts in groups]
    streamed = PhraseExtractor(nlp, batch_size=2)
    pipes = []
    real_pipe = nlp.pipe

    def counting_pipe(*args, **kwargs):
        pipes.append(kwargs)
        return real_pipe(*args, **kwargs)

    with mock.patch.object(nlp, "pipe", side_effect=counting_pipe):
        got = list(streamed.stream(iter(groups), n_process=1))
    assert got == want
    ours = [kwargs for kwargs in pipes if kwargs.get("as_tuples")]  # spaCy calls itself too
    assert len(ours) == 1 and ours[0]["n_process"] == 1  # one pipe for every chunk
    assert streamed.parsed == 5  # each distinct sentence once


def test_spacy_processes_follow_the_sentences_to_parse_and_the_cpus():
    from mmf_uvlp.corpus.noun_phrases import phrase_processes

    with mock.patch("os.sched_getaffinity", return_value=set(range(8))):
        assert phrase_processes(None, 240) == 1  # the tiny world: no worker to start
        assert phrase_processes(None, 50_000) == 3
        assert phrase_processes(None, 16_500_000) == 8  # CC scale: every CPU
        assert phrase_processes(None, 16_500_000, threads=2) == 2  # run.num_threads
        assert phrase_processes(4, 10) == 4  # phrases.n_process set
