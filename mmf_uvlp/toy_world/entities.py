"""Flickr30K Entities annotations of the ``flickr30k`` pool (the SNLI-VE images).

Every image gets :data:`CAPTIONS_PER_IMAGE` captions whose noun phrases are marked
``[/EN#<entity>/<type> ...]`` and tied to the gold boxes of the objects they name
("two dogs" or "two animals": one entity with two boxes; a phrase naming the same
objects in another caption of the image has the same entity id). The format is
documented with its reader, :mod:`mmf_uvlp.data_formats.flickr30k_entities`; the split
lists follow the split of the image's SNLI-VE hypotheses. Random choices come from the
``("entities", image_id)`` stream, so adding this writer changes no other file of the world.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from mmf_uvlp.toy_world.scene import Scene
from mmf_uvlp.toy_world.text import noun_phrase
from mmf_uvlp.toy_world.vocabulary import CLASSES, NUMBER_WORDS, plural
from mmf_uvlp.toy_world.writers import write_lines

FOLDER = "flickr30k_entities"
CAPTIONS_PER_IMAGE = 5
ENTITY_TYPES = {
    "person": "people",
    "animal": "animals",
    "vehicle": "vehicles",
    "clothing": "clothing",
    "scenery": "scene",
}
GROUP_NOUNS = {
    "person": "people",
    "animal": "animals",
    "vehicle": "vehicles",
    "plant": "plants",
    "furniture": "pieces of furniture",
}
_PLACES = ("on", "in front of", "near", "next to")
_PREFIXES = ((), (), ("a", "photo", "of"), ("a", "view", "of"), ("a", "picture", "of"))

Mention = tuple[tuple[int, ...], tuple[str, ...]]  # (object indices, words)


def entity_type(cls: int) -> str:
    """The Flickr30K Entities type of a class (people, animals, ..., scene, other)."""
    return ENTITY_TYPES.get(CLASSES[cls].supercategory, "other")


def _pick(rng: np.random.Generator, options):
    return options[int(rng.integers(len(options)))]


def _single(rng: np.random.Generator, scene: Scene, index: int) -> Mention:
    obj = scene.objects[index]
    return (index,), tuple(noun_phrase(rng, obj.cls, obj.attrs).split())


def _place(rng: np.random.Generator, scene: Scene) -> list[tuple[str, Mention | None]]:
    """Optionally ' on the beach': a preposition and a background mention."""
    background = [i for i, o in enumerate(scene.objects) if o.background]
    if not background or rng.random() < 0.4:
        return []
    index = _pick(rng, background)
    words = ("the", scene.objects[index].name)
    return [(_pick(rng, _PLACES), None), ("", ((index,), words))]


def _groups(scene: Scene, foreground: list[int]) -> list[Mention]:
    """Mentions of several objects: of one class ("two dogs") or supercategory ("two animals")."""
    by_class: dict[int, list[int]] = {}
    by_supercategory: dict[str, list[int]] = {}
    for i in foreground:
        by_class.setdefault(scene.objects[i].cls, []).append(i)
        by_supercategory.setdefault(CLASSES[scene.objects[i].cls].supercategory, []).append(i)
    nouns = [(members, plural(CLASSES[cls].name)) for cls, members in by_class.items()]
    nouns += [
        (members, GROUP_NOUNS[supercategory])
        for supercategory, members in by_supercategory.items()
        if supercategory in GROUP_NOUNS and len({scene.objects[i].cls for i in members}) > 1
    ]
    return [
        (tuple(members), (NUMBER_WORDS[len(members)], *noun.split()))
        for members, noun in nouns
        if len(members) > 1
    ]


def _caption(rng: np.random.Generator, scene: Scene) -> list[tuple[str, Mention | None]]:
    """One caption as pieces: plain words, or a mention of some objects."""
    foreground = scene.foreground()
    relations = [r for r in scene.relations if r[0] in foreground and r[2] in foreground]
    groups = _groups(scene, foreground)
    pieces: list[tuple[str, Mention | None]] = [(" ".join(_pick(rng, _PREFIXES)), None)]
    style = rng.random()
    if relations and style < 0.35:
        subject, predicate, obj = _pick(rng, relations)
        pieces += [
            ("", _single(rng, scene, subject)),
            (predicate, None),
            ("", _single(rng, scene, obj)),
        ]
    elif groups and style < 0.6:
        pieces.append(("", _pick(rng, groups)))
    else:
        area = {
            i: (b[2] - b[0]) * (b[3] - b[1])
            for i, b in ((i, scene.objects[i].box) for i in foreground)
        }
        ranked = sorted(foreground, key=lambda i: (-area[i], i))[: int(rng.integers(1, 4))]
        for k, index in enumerate(ranked):
            if k:
                pieces.append(("and" if k == len(ranked) - 1 else ",", None))
            pieces.append(("", _single(rng, scene, index)))
    pieces += _place(rng, scene)
    return pieces


class _EntityIds:
    """Entity ids by the set of objects a phrase names; new ids count up from ``start``."""

    def __init__(self, start: int):
        self.next = start
        self.ids: dict[tuple[int, ...], int] = {}

    def __call__(self, objects: tuple[int, ...]) -> int:
        key = tuple(sorted(objects))
        if key not in self.ids:
            self.ids[key] = self.next
            self.next += 1
        return self.ids[key]


def _markup(
    pieces: Iterable[tuple[str, Mention | None]], scene: Scene, entity_ids: _EntityIds
) -> str:
    tokens: list[str] = []
    for text, mention in pieces:
        if mention is None:
            tokens += text.split()
            continue
        objects, words = mention
        kind = entity_type(scene.objects[objects[0]].cls)
        tokens += [f"[/EN#{entity_ids(objects)}/{kind}"] + list(words[:-1]) + [words[-1] + "]"]
    tokens.append(".")
    if not tokens[0].startswith("["):
        tokens[0] = tokens[0].capitalize()
    return " ".join(tokens)


def pixel_box(box, width: int, height: int) -> list[int]:
    """[x1, y1, x2, y2] continuous pixels -> 1-based inclusive [xmin, ymin, xmax, ymax]."""
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    xmin, ymin = min(max(x1 + 1, 1), width), min(max(y1 + 1, 1), height)
    return [xmin, ymin, min(max(x2, xmin), width), min(max(y2, ymin), height)]


def annotation_xml(scene: Scene, entity_ids: Mapping[tuple[int, ...], int]) -> list[str]:
    """The lines of ``Annotations/<id>.xml``: one ``<object>`` per mentioned object."""
    names: dict[int, list[int]] = {}
    for objects, entity in sorted(entity_ids.items(), key=lambda item: item[1]):
        for index in objects:
            names.setdefault(index, []).append(entity)
    lines = [
        "<annotation>",
        f"\t<filename>{scene.image_id}.jpg</filename>",
        "\t<size>",
        f"\t\t<width>{scene.width}</width>",
        f"\t\t<height>{scene.height}</height>",
        "\t\t<depth>3</depth>",
        "\t</size>",
    ]
    for index in sorted(names):
        box = pixel_box(scene.objects[index].box, scene.width, scene.height)
        lines.append("\t<object>")
        lines += [f"\t\t<name>{entity}</name>" for entity in names[index]]
        lines.append("\t\t<bndbox>")
        lines += [
            f"\t\t\t<{tag}>{value}</{tag}>"
            for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), box)
        ]
        lines += ["\t\t</bndbox>", "\t</object>"]
    lines.append("</annotation>")
    return lines


def write_flickr30k_entities(
    out: Path,
    rng: Callable[..., np.random.Generator],
    scenes: Iterable[Scene],
    ve_records: Mapping[str, list[dict]],
) -> dict[str, str]:
    """Write ``flickr30k_entities/`` for ``scenes``; returns its paths relative to ``out``.

    ``rng(name, image_id)`` gives the per-image generator (the world's ``Streams``);
    ``ve_records`` are the SNLI-VE records per split, which assign each image its split.
    """
    root = Path(out) / FOLDER
    entity_ids = _EntityIds(start=1)
    for scene in scenes:
        image_rng = rng("entities", scene.image_id)
        entity_ids.ids = {}
        captions = [
            _markup(_caption(image_rng, scene), scene, entity_ids)
            for _ in range(CAPTIONS_PER_IMAGE)
        ]
        write_lines(root / "Sentences" / f"{scene.image_id}.txt", captions)
        write_lines(
            root / "Annotations" / f"{scene.image_id}.xml", annotation_xml(scene, entity_ids.ids)
        )
    paths = {
        "root": FOLDER,
        "sentences": f"{FOLDER}/Sentences",
        "annotations": f"{FOLDER}/Annotations",
    }
    for split, records in ve_records.items():
        ids = sorted({r["Flikr30kID"].split(".")[0] for r in records})
        write_lines(root / f"{split}.txt", ids)
        paths[split] = f"{FOLDER}/{split}.txt"
    return paths
