"""Probe examples: a caption's word-pieces, its grounded entities and dependency arcs.

From every caption of a Flickr30K Entities image this builds one :class:`Example`:
``[CLS] word-pieces [SEP]`` (the caption's own words, so phrase markup maps exactly onto
tokens) and two kinds of :class:`Source`, each a set of text positions whose attention
to the regions is scored against the boxes of a target entity:

- entity grounding: the word-pieces of every phrase whose entity has a gold box;
- syntactic grounding (spaCy parse of the same words): for every dependency arc between
  a word ``w2`` and the root word ``w1`` of a grounded phrase, the pieces of ``w2`` with
  ``w1``'s entity as target, labelled by the arc's relation ("a" -det-> "man": the
  determiner's attention is scored against the man's box). An arc between two phrase
  roots gives a source in each direction.

Phrases without a gold box (scene, not visual, no box) and pieces cut off by
``max_length`` are skipped and counted in :attr:`ExampleBuilder.skipped`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from mmf_uvlp.data_formats.flickr30k_entities import Box, EntityImage, Phrase, Sentence

ENTITY = "entity"


@dataclass(frozen=True)
class Source:
    """Text positions whose attention is scored against ``gold`` (the target's boxes)."""

    kind: str  # ENTITY or a dependency relation label
    tokens: tuple[int, ...]  # positions in the example's input ids
    text: str  # the source words
    entity_id: str  # the target entity
    gold: tuple[Box, ...]
    target_root: int  # the root word of the target entity's phrase


@dataclass(frozen=True)
class Example:
    """One caption of one image, tokenised, with its probe sources."""

    image_id: str
    line: int  # the caption's line in Sentences/<image_id>.txt
    words: tuple[str, ...]
    input_ids: tuple[int, ...]  # [CLS] pieces [SEP]
    word_tokens: tuple[tuple[int, ...], ...]  # positions of each word's pieces
    heads: tuple[int, ...]  # dependency head of each word (itself for the root)
    relations: tuple[str, ...]  # dependency label of each word
    entities: tuple[Source, ...]
    syntactic: tuple[Source, ...]

    @property
    def key(self) -> str:
        return f"{self.image_id}#{self.line}"


def phrase_root(phrase: Phrase, heads: Sequence[int]) -> int:
    """The phrase's word whose head lies outside it (the last such word, if several)."""
    inside = range(phrase.first_word, phrase.end_word)
    roots = [w for w in inside if heads[w] not in inside or heads[w] == w]
    return roots[-1] if roots else phrase.end_word - 1


class ExampleBuilder:
    """Turns images into examples with a BERT fast tokenizer and a spaCy pipeline."""

    def __init__(self, tokenizer, nlp, max_length: int = 64):
        self.tokenizer, self.nlp, self.max_length = tokenizer, nlp, max_length
        self.skipped: Counter = Counter()

    def _tokens(self, words: Sequence[str]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        encoded = self.tokenizer(
            list(words), is_split_into_words=True, truncation=True, max_length=self.max_length
        )
        positions: list[list[int]] = [[] for _ in words]
        for position, word in enumerate(encoded.word_ids()):
            if word is not None:
                positions[word].append(position)
        return tuple(encoded["input_ids"]), tuple(tuple(p) for p in positions)

    def _parse(self, sentences: Sequence[Sentence]):
        from spacy.tokens import Doc

        docs = [Doc(self.nlp.vocab, words=list(s.words)) for s in sentences]
        return list(self.nlp.pipe(docs))

    def __call__(self, image: EntityImage) -> Iterator[Example]:
        docs = self._parse(image.sentences)
        for sentence, doc in zip(image.sentences, docs):
            yield self.example(image, sentence, [t.head.i for t in doc], [t.dep_ for t in doc])

    def examples(self, images: Iterable[EntityImage]) -> Iterator[Example]:
        for image in images:
            yield from self(image)

    def example(
        self, image: EntityImage, sentence: Sentence, heads: Sequence[int], relations: Sequence[str]
    ) -> Example:
        """One example from a caption and its parse (``heads``/``relations`` per word)."""
        input_ids, word_tokens = self._tokens(sentence.words)
        entities: list[Source] = []
        roots: dict[int, tuple[Phrase, tuple[Box, ...]]] = {}
        for phrase in sentence.phrases:
            gold = image.gold_boxes(phrase.entity_id)
            if not gold:
                self.skipped["phrase without a gold box"] += 1
                continue
            span = range(phrase.first_word, phrase.end_word)
            if any(not word_tokens[w] for w in span):
                self.skipped["phrase cut off by max_length"] += 1
                continue
            tokens = tuple(t for w in span for t in word_tokens[w])
            root = phrase_root(phrase, heads)
            entities.append(Source(ENTITY, tokens, phrase.text, phrase.entity_id, gold, root))
            roots.setdefault(root, (phrase, gold))
        syntactic: list[Source] = []
        for dependent, head in enumerate(heads):
            if head == dependent:
                continue
            for word, other in ((head, dependent), (dependent, head)):
                if word not in roots:
                    continue
                phrase, gold = roots[word]
                if not word_tokens[other]:
                    self.skipped["arc cut off by max_length"] += 1
                    continue
                syntactic.append(
                    Source(
                        relations[dependent],
                        word_tokens[other],
                        sentence.words[other],
                        phrase.entity_id,
                        gold,
                        word,
                    )
                )
        return Example(
            image.image_id,
            sentence.line,
            sentence.words,
            input_ids,
            word_tokens,
            tuple(heads),
            tuple(relations),
            tuple(entities),
            tuple(syntactic),
        )
