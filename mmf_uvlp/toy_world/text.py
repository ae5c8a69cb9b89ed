"""Text of the world: captions of scenes and a narrative (BookCorpus-like) corpus.

Captions describe a few salient objects with attributes, counts and relations in
varied templates, with web-caption noise ("stock photo", "on a sunny day").
Narrative sentences mention objects inside stories, or nothing visual at all.
"""

from __future__ import annotations

import re

import numpy as np

from mmf_uvlp.toy_world.scene import Scene
from mmf_uvlp.toy_world.vocabulary import (
    ATTRIBUTE_GROUPS,
    CLASSES,
    NUMBER_WORDS,
    ClassSet,
    article,
    attribute_groups,
    plural,
)

_DISTRACTORS = (
    "on a sunny day",
    "in the city",
    "at night",
    "during the holidays",
    "in the morning",
    "after the rain",
    "in summer",
    "in winter",
    "close up",
    "at the weekend",
)
_PREFIXES = (
    "",
    "",
    "",
    "photo of ",
    "a view of ",
    "stock image of ",
    "picture of ",
    "an image of ",
)
_SUFFIXES = (
    "",
    "",
    "",
    " - stock photo",
    " in this picture",
    ", vintage style",
    " for sale",
    " near my home",
)
_NAMES = (
    "Anna",
    "Ben",
    "Clara",
    "David",
    "Emma",
    "Frank",
    "Grace",
    "Henry",
    "Isla",
    "Jack",
    "Kate",
    "Leo",
    "Maria",
    "Nick",
    "Olivia",
    "Paul",
    "Quinn",
    "Rosa",
    "Sam",
    "Tom",
    "Uma",
    "Victor",
    "Wendy",
    "Xavier",
    "Yara",
    "Zoe",
    "Martha",
    "Elliot",
    "Nora",
    "Oscar",
)
_PRONOUNS = ("he", "she", "they")
_ACTIONS = (
    "looked out of the window",
    "sighed",
    "went back to bed",
    "left the room",
    "smiled at nobody in particular",
    "called her sister",
    "waited",
    "put on a coat",
    "closed the door behind him",
    "turned off the light",
)
_FEELINGS = (
    "tired",
    "nervous",
    "happy",
    "lonely",
    "relieved",
    "angry",
    "curious",
    "sad",
    "hopeful",
    "afraid",
)
_TIMES = (
    "the next morning",
    "that evening",
    "a week later",
    "before dawn",
    "after dinner",
    "on Sunday",
    "in the spring",
    "the day before",
    "at noon",
    "years later",
)
_ABSTRACT = (
    "the letter",
    "the past",
    "the promise",
    "her decision",
    "his mistake",
    "the news",
    "the future",
    "the argument",
    "the money",
    "the question",
)
_VISUAL_TEMPLATES = (
    "{Name} picked up the {np} and {action}.",
    "There was {a_np} {rel} the {np2}, just as {pron} remembered.",
    "{Name} stared at the {np} for a long time.",
    "The {np} {rel} the {np2} had not moved since {time}.",
    "{Pron} noticed {a_np} {rel} {a_np2}.",
    '"Where did you put the {np}?" {Name} asked.',
    "{Name} walked past the {np} without a word.",
    "Outside, {a_np} waited {rel} the {np2}.",
    "{Time}, {Name} found {a_np} {rel} the {np2}.",
    "{Pron} remembered the {np} from {time}.",
    "{Name} bought {a_np} and carried it home.",
    "Somewhere behind the {np2}, {a_np} was waiting.",
)
_NONVISUAL_TEMPLATES = (
    "{Name} wondered whether {pron} had made the right decision.",
    "Nobody said anything for a long time.",
    "It had been {num} years since {Name} left home.",
    "{Pron} could not stop thinking about {abstract}.",
    "The meeting was postponed until {time}.",
    "{Name} laughed, but it sounded hollow.",
    "{Name} felt {feeling} and did not know why.",
    "{Time}, everything seemed different.",
    '"I never meant to hurt you," {Name} said.',
    "{Pron} knew that {abstract} would change everything.",
)


def tokenize(sentence: str) -> list[str]:
    """Lower-cased word tokens, as MMF's ``tokenize`` splits questions."""
    return re.findall(r"\w+", sentence.lower())


def _pick(rng: np.random.Generator, options):
    return options[int(rng.integers(len(options)))]


def noun_phrase(
    rng: np.random.Generator,
    cls: int,
    attrs: dict[str, str],
    count: int = 1,
    attr_rate: float = 0.6,
    determiner: bool = True,
) -> str:
    """'a small red cup', 'two dogs'; without ``determiner`` the bare 'small red cup'."""
    words = []
    for group in ("state", "size", "colour", "material"):
        if group in attrs and rng.random() < attr_rate:
            words.append(attrs[group])
    if count == 1:
        head = " ".join(words + [CLASSES[cls].name])
        return f"{article(head)} {head}" if determiner else head
    head = " ".join(words[:1] + [plural(CLASSES[cls].name)])
    return f"{NUMBER_WORDS[count] if count < len(NUMBER_WORDS) else 'many'} {head}"


def _and_list(phrases: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def caption(rng: np.random.Generator, scene: Scene, exclude: set[int] = frozenset()) -> str:
    """A ground-truth caption of ``scene``, never naming a class in ``exclude``."""
    fg = [i for i in scene.foreground() if scene.objects[i].cls not in exclude]
    bg = [i for i, o in enumerate(scene.objects) if o.background]
    area = {i: (b[2] - b[0]) * (b[3] - b[1]) for i, b in ((i, scene.objects[i].box) for i in fg)}
    rel = [r for r in scene.relations if r[0] in area and r[2] in area]
    prefix, suffix = _pick(rng, _PREFIXES), _pick(rng, _SUFFIXES)
    if rng.random() < 0.3:
        suffix = " " + _pick(rng, _DISTRACTORS) + suffix
    style = rng.random()
    place = ""
    if bg and rng.random() < 0.5:
        b = scene.objects[_pick(rng, bg)]
        place = f" {_pick(rng, ('on the', 'in front of the', 'near the'))} {b.name}"
    if not fg:
        body = f"an empty scene with the {scene.objects[bg[0]].name}" if bg else "nothing"
    elif rel and style < 0.45:
        s, p, o = _pick(rng, rel)
        a, b = scene.objects[s], scene.objects[o]
        body = f"{noun_phrase(rng, a.cls, a.attrs)} {p} {noun_phrase(rng, b.cls, b.attrs)}{place}"
    elif style < 0.7:
        counts: dict[int, list[int]] = {}
        for i in fg:
            counts.setdefault(scene.objects[i].cls, []).append(i)
        cls = max(counts, key=lambda c: (len(counts[c]), -c))
        n = len(counts[cls])
        first = scene.objects[counts[cls][0]]
        noun = noun_phrase(rng, cls, first.attrs if n == 1 else {}, n, attr_rate=0.4)
        verb = "is" if n == 1 else "are"
        body = f"there {verb} {noun}{place}"
    else:
        ranked = sorted(fg, key=lambda i: (-area[i], i))[: int(rng.integers(1, 4))]
        nps = [noun_phrase(rng, scene.objects[i].cls, scene.objects[i].attrs) for i in ranked]
        body = _and_list(nps) + place
    return (prefix + body + suffix).strip()


def _background_caption(scene: Scene) -> str:
    """'the sky': a scene without foreground named by its first background region."""
    background = [o for o in scene.objects if o.background]
    return f"the {background[0].name}" if background else "nothing"


def _one_to_three(rng: np.random.Generator, items: list) -> list:
    """1 to 3 of ``items`` (as many as there are at most), in random order."""
    count = int(rng.integers(1, min(3, len(items)) + 1))
    return [items[i] for i in rng.permutation(len(items))[:count]]


def object_list_caption(rng: np.random.Generator, scene: Scene) -> str:
    """'a dog, a hat and an elephant': 1-3 distinct foreground classes of ``scene`` in random
    order, without attributes, relations or web noise, so that the words of the caption say
    little about which classes it names (its first background region for a scene without
    foreground)."""
    classes = sorted({scene.objects[i].cls for i in scene.foreground()})
    if not classes:
        return _background_caption(scene)
    return _and_list([noun_phrase(rng, c, {}) for c in _one_to_three(rng, classes)])


def attribute_list_caption(rng: np.random.Generator, scene: Scene) -> str:
    """'a small red cup, a wooden table and a dog': 1-3 foreground objects of ``scene`` in
    random order, each naming each of its attributes with probability 0.6 (as web captions
    do), without relations or web noise; the words that say how an object looks are then in
    the caption, as in real captions, and only the image says which objects they describe
    (its first background region for a scene without foreground)."""
    objects = scene.foreground()
    if not objects:
        return _background_caption(scene)
    chosen = [scene.objects[i] for i in _one_to_three(rng, objects)]
    return _and_list([noun_phrase(rng, o.cls, o.attrs) for o in chosen])


CAPTION_STYLES = {
    "web": caption,
    "objects": object_list_caption,
    "attributes": attribute_list_caption,
}


def _random_np(rng: np.random.Generator, classes: ClassSet) -> tuple[int, dict[str, str]]:
    cls = classes.foreground[int(rng.integers(len(classes.foreground)))]
    attrs = {g: _pick(rng, ATTRIBUTE_GROUPS[g]) for g in attribute_groups(CLASSES[cls])}
    return cls, attrs


def narrative_sentence(
    rng: np.random.Generator, classes: ClassSet, visual_rate: float = 0.7
) -> str:
    """One BookCorpus-like sentence; about objects of ``classes`` with probability
    ``visual_rate``."""
    name, pron = _pick(rng, _NAMES), _pick(rng, _PRONOUNS)
    time = _pick(rng, _TIMES)
    fields = {
        "Name": name,
        "pron": pron,
        "Pron": pron.capitalize(),
        "time": time,
        "Time": time[0].upper() + time[1:],
        "action": _pick(rng, _ACTIONS),
        "feeling": _pick(rng, _FEELINGS),
        "abstract": _pick(rng, _ABSTRACT),
        "num": _pick(rng, NUMBER_WORDS[2:]),
    }
    if rng.random() >= visual_rate:
        return _pick(rng, _NONVISUAL_TEMPLATES).format(**fields)
    c1, a1 = _random_np(rng, classes)
    c2, a2 = _random_np(rng, classes)
    np1 = noun_phrase(rng, c1, a1, attr_rate=0.5, determiner=False)
    np2 = noun_phrase(rng, c2, a2, attr_rate=0.3, determiner=False)
    fields.update(
        np=np1,
        np2=np2,
        a_np=f"{article(np1)} {np1}",
        a_np2=f"{article(np2)} {np2}",
        rel=_pick(rng, ("on", "under", "next to", "near", "beside")),
    )
    return _pick(rng, _VISUAL_TEMPLATES).format(**fields)
