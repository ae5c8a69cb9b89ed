"""Flickr30K Entities: captions whose phrases are tied to entities and their boxes.

Layout under a root folder (as in the official ``annotations.zip`` plus split lists):

- ``Sentences/<image_id>.txt``: one caption a line, words separated by spaces; a phrase
  is marked ``[/EN#<entity id>/<type>[/<type>...] words]``, e.g.
  ``[/EN#18/people A man] with [/EN#19/clothing a red hat] .``. Phrases may nest
  (``[/EN#1/people a man with [/EN#2/clothing a hat]]``): the inner one closes first.
- ``Annotations/<image_id>.xml``: ``<annotation>`` with ``<size>`` (``width``,
  ``height``, ``depth``) and one ``<object>`` per box: one or more ``<name>`` (the entity
  ids the box belongs to) and ``<bndbox>`` (``xmin``, ``ymin``, ``xmax``, ``ymax``:
  1-based, inclusive pixel indices), or, for an entity without a box, ``<nobndbox>`` /
  ``<scene>`` flags (0 or 1). An entity may have several boxes ("two dogs").
- ``train.txt`` / ``val.txt`` / ``test.txt``: the image ids of each split, one a line.

Boxes are returned as ``[x1, y1, x2, y2]`` in continuous pixel coordinates
(``[xmin - 1, ymin - 1, xmax, ymax]``), the convention of detector boxes. Images are
streamed one at a time; every malformed record raises :class:`FormatError` naming the
file, the line and what was expected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from xml.parsers import expat

from mmf_uvlp.errors import FormatError

SPLITS = ("train", "val", "test")
BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
SIZE_FIELDS = ("width", "height", "depth")
_OPENER = re.compile(r"\[/EN#(\d+)((?:/[A-Za-z]+)+)$")

Box = tuple[float, float, float, float]
StrPath = str | os.PathLike


@dataclass(frozen=True)
class Phrase:
    """One marked phrase: its entity, types and words ``[first_word, end_word)``."""

    entity_id: str
    types: tuple[str, ...]
    first_word: int
    words: tuple[str, ...]

    @property
    def end_word(self) -> int:
        return self.first_word + len(self.words)

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class Sentence:
    """One caption: its words without markup and its phrases in opening order."""

    line: int
    words: tuple[str, ...]
    phrases: tuple[Phrase, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class Annotation:
    """One image's boxes: entity id -> boxes, and the ids marked scene / no box."""

    filename: str
    width: int
    height: int
    depth: int
    boxes: dict[str, tuple[Box, ...]]
    scene: frozenset[str] = frozenset()
    nobox: frozenset[str] = frozenset()


@dataclass(frozen=True)
class EntityImage:
    """An image's captions and boxes."""

    image_id: str
    sentences: tuple[Sentence, ...]
    annotation: Annotation

    def gold_boxes(self, entity_id: str) -> tuple[Box, ...]:
        """The entity's boxes; empty for scene, no-box and not-visual entities."""
        return self.annotation.boxes.get(entity_id, ())


# ------------------------------------------------------------------------- sentences
def parse_sentence(text: str, path: StrPath, line: int) -> Sentence:
    """Parse one caption line with ``[/EN#id/type words]`` markup."""
    words: list[str] = []
    phrases: list[Phrase | None] = []
    open_phrases: list[tuple[int, str, tuple[str, ...], int]] = []  # (slot, id, types, first)
    for token in text.split():
        if token.startswith("["):
            match = _OPENER.match(token)
            if match is None:
                raise FormatError(
                    path,
                    "phrase",
                    "an opening '[/EN#<id>/<type>' (digits id, alphabetic types)",
                    token,
                    line=line,
                )
            types = tuple(match.group(2).split("/")[1:])
            open_phrases.append((len(phrases), match.group(1), types, len(words)))
            phrases.append(None)
            continue
        word = token.rstrip("]")
        closes = len(token) - len(word)
        if not word or "[" in word or "]" in word:
            raise FormatError(
                path,
                "word",
                "a word (phrases hold at least one word; brackets only as markup)",
                token,
                line=line,
            )
        if closes > len(open_phrases):
            raise FormatError(
                path,
                "phrase",
                f"at most {len(open_phrases)} closing ']' (one per open phrase)",
                token,
                line=line,
            )
        words.append(word)
        for _ in range(closes):
            slot, entity_id, types, first = open_phrases.pop()
            phrases[slot] = Phrase(entity_id, types, first, tuple(words[first:]))
    if open_phrases:
        raise FormatError(
            path,
            "phrase",
            "a closing ']' for every phrase",
            f"{len(open_phrases)} unclosed",
            line=line,
        )
    if not words:
        raise FormatError(path, "sentence", "at least one word", text, line=line)
    return Sentence(line, tuple(words), tuple(p for p in phrases if p is not None))


def read_sentences(path: StrPath) -> Iterator[Sentence]:
    """Stream the captions of one ``Sentences/<id>.txt`` (blank lines are skipped)."""
    with open(path, "rb") as f:
        for line, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(path, "encoding", "UTF-8", str(e), line=line) from None
            if text.strip():
                yield parse_sentence(text, path, line)


# ------------------------------------------------------------------------- annotations
@dataclass
class _Element:
    tag: str
    line: int
    text: str = ""
    children: list["_Element"] = field(default_factory=list)

    def all(self, tag: str) -> list["_Element"]:
        return [c for c in self.children if c.tag == tag]

    def one(self, tag: str, path: StrPath, required: bool = True) -> "_Element | None":
        found = self.all(tag)
        if len(found) > 1 or (required and not found):
            raise FormatError(
                path,
                f"{self.tag}.{tag}",
                f"exactly one <{tag}> in <{self.tag}>",
                f"{len(found)}",
                line=self.line,
            )
        return found[0] if found else None


def _parse_xml(path: StrPath) -> _Element:
    """A minimal element tree that keeps each element's line number."""
    parser = expat.ParserCreate()
    stack: list[_Element] = []
    roots: list[_Element] = []

    def start(tag: str, attributes: dict) -> None:
        element = _Element(tag, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(tag: str) -> None:
        stack.pop()

    def data(text: str) -> None:
        if stack:
            stack[-1].text += text

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler = data
    with open(path, "rb") as f:
        try:
            parser.ParseFile(f)
        except expat.ExpatError as e:
            raise FormatError(
                path, "xml", f"well-formed xml ({expat.errors.messages[e.code]})", line=e.lineno
            ) from None
    return roots[0]


def _integer(
    element: _Element, path: StrPath, field_name: str, low: int, high: int | None = None
) -> int:
    text = element.text.strip()
    value = int(text) if re.fullmatch(r"-?\d+", text) else None
    if value is None or value < low or (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise FormatError(path, field_name, f"an integer {bounds}", text, line=element.line)
    return value


def _box(element: _Element, path: StrPath, width: int, height: int) -> Box:
    values = {}
    for name in BOX_FIELDS:
        child = element.one(name, path)
        limit = width if name.startswith("x") else height
        values[name] = _integer(child, path, f"bndbox.{name}", 1, limit)
    if values["xmax"] < values["xmin"] or values["ymax"] < values["ymin"]:
        raise FormatError(
            path,
            "bndbox",
            "xmin <= xmax and ymin <= ymax",
            [values[n] for n in BOX_FIELDS],
            line=element.line,
        )
    return (
        values["xmin"] - 1.0,
        values["ymin"] - 1.0,
        float(values["xmax"]),
        float(values["ymax"]),
    )


def read_annotation(path: StrPath) -> Annotation:
    """Parse and check one ``Annotations/<id>.xml``."""
    root = _parse_xml(path)
    if root.tag != "annotation":
        raise FormatError(path, "root", "an <annotation> element", root.tag, line=root.line)
    size = root.one("size", path)
    width, height, depth = (
        _integer(size.one(name, path), path, f"size.{name}", 1) for name in SIZE_FIELDS
    )
    filename = root.one("filename", path, required=False)
    boxes: dict[str, list[Box]] = {}
    scene: set[str] = set()
    nobox: set[str] = set()
    for obj in root.all("object"):
        names = [n.text.strip() for n in obj.all("name")]
        if not names or not all(n.isdigit() for n in names):
            raise FormatError(
                path, "object.name", "one or more <name> entity ids (digits)", names, line=obj.line
            )
        bndbox = obj.one("bndbox", path, required=False)
        flags = {tag: obj.one(tag, path, required=False) for tag in ("nobndbox", "scene")}
        if bndbox is None and all(flag is None for flag in flags.values()):
            raise FormatError(
                path, "object", "a <bndbox>, or <nobndbox> / <scene> flags", names, line=obj.line
            )
        if bndbox is not None:
            box = _box(bndbox, path, width, height)
            for name in names:
                boxes.setdefault(name, []).append(box)
            continue
        for tag, target in (("nobndbox", nobox), ("scene", scene)):
            if flags[tag] is not None and _integer(flags[tag], path, f"object.{tag}", 0, 1):
                target.update(names)
    return Annotation(
        filename=filename.text.strip() if filename is not None else "",
        width=width,
        height=height,
        depth=depth,
        boxes={k: tuple(v) for k, v in boxes.items()},
        scene=frozenset(scene),
        nobox=frozenset(nobox),
    )


# ------------------------------------------------------------------------- data set
class Flickr30kEntities:
    """A Flickr30K Entities root: split lists, ``Sentences/`` and ``Annotations/``."""

    def __init__(self, root: StrPath):
        self.root = Path(root)
        for folder in ("Sentences", "Annotations"):
            if not (self.root / folder).is_dir():
                raise FileNotFoundError(f"Flickr30K Entities: no {folder}/ folder in {self.root}")

    def image_ids(self, split: str | None = None) -> list[str]:
        """The ids listed in ``<split>.txt``; all sentence files when ``split`` is None."""
        if split is None:
            return sorted(p.stem for p in (self.root / "Sentences").glob("*.txt"))
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        path = self.root / f"{split}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"Flickr30K Entities: split list {path} not found")
        ids = []
        with open(path, encoding="utf-8") as f:
            for line, text in enumerate(f, start=1):
                image_id = text.strip()
                if not image_id:
                    continue
                if not image_id.isdigit():
                    raise FormatError(
                        path, "image_id", "a numeric Flickr image id", image_id, line=line
                    )
                ids.append(image_id)
        return ids

    def image(self, image_id: str) -> EntityImage:
        """One image's captions and boxes."""
        sentences = tuple(read_sentences(self.root / "Sentences" / f"{image_id}.txt"))
        annotation = read_annotation(self.root / "Annotations" / f"{image_id}.xml")
        return EntityImage(image_id, sentences, annotation)

    def images(self, split: str | None = None) -> Iterator[EntityImage]:
        """Stream the images of ``split`` (all images when None), in the list's order."""
        for image_id in self.image_ids(split):
            yield self.image(image_id)
