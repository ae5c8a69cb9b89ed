"""The toy world's vocabulary: object classes, attributes and relations.

Class indices are positions in :data:`CLASSES` and are what the MMF feature files
store in ``objects``; ``cls_prob`` has one more column, index 0 = background.
A world may draw from fewer foreground classes (:class:`ClassSet`); the vocabulary,
and with it every class index, stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial
from typing import Callable

BACKGROUND_LABEL = "__background__"


@dataclass(frozen=True)
class ObjectClass:
    """One object class of the world."""

    name: str
    supercategory: str
    size: float  # typical box side as a fraction of the image side
    handheld: bool = False  # can be "held" by a person
    surface: bool = False  # things can be "on" it
    rideable: bool = False  # a person can be "riding" it
    background: bool = False  # scenery: sky, wall, road, ...

    @property
    def is_person(self) -> bool:
        return self.supercategory == "person"


def _group(supercategory: str, size: float, names: str, **flags: str) -> list[ObjectClass]:
    """Classes of one supercategory; ``flags`` maps a flag to space-free names."""
    out = []
    for name in names.split(","):
        name = name.strip()
        kwargs = {flag: name in members.split(",") for flag, members in flags.items()}
        out.append(ObjectClass(name, supercategory, size, **kwargs))
    return out


CLASSES: tuple[ObjectClass, ...] = tuple(
    _group(
        "person",
        0.42,
        "man,woman,boy,girl,child,baby,person,player,skier,surfer,skateboarder,chef,police officer",
    )
    + _group(
        "animal",
        0.32,
        "dog,cat,horse,cow,sheep,bird,elephant,zebra,giraffe,bear,duck,goat,pig,rabbit,"
        "deer,chicken,lion,monkey,pigeon,squirrel",
        rideable="horse,elephant",
    )
    + _group(
        "vehicle",
        0.36,
        "car,bus,truck,bicycle,motorcycle,train,airplane,boat,van,taxi,scooter,tractor,"
        "helicopter,ambulance,cart,wagon",
        rideable="bicycle,motorcycle,scooter,boat,cart,wagon",
    )
    + _group(
        "furniture",
        0.32,
        "chair,couch,table,bed,bench,desk,shelf,cabinet,dresser,stool,armchair,"
        "bookshelf,sofa,counter,nightstand",
        surface="table,bed,bench,desk,shelf,counter,nightstand,dresser,couch,sofa",
    )
    + _group(
        "food",
        0.15,
        "pizza,sandwich,banana,apple,orange,cake,donut,broccoli,carrot,hot dog,"
        "hamburger,bread,cheese,egg,tomato,strawberry,lemon,cookie,salad,soup",
        handheld="sandwich,banana,apple,orange,donut,carrot,hot dog,hamburger,cookie",
    )
    + _group(
        "kitchenware",
        0.14,
        "cup,bowl,plate,fork,knife,spoon,bottle,wine glass,mug,pot,pan,teapot,jar,cutting board",
        handheld="cup,fork,knife,spoon,bottle,wine glass,mug,jar",
    )
    + _group(
        "electronics",
        0.18,
        "television,laptop,cell phone,keyboard,computer mouse,remote,monitor,camera,"
        "microwave,oven,refrigerator,speaker",
        handheld="cell phone,remote,camera,computer mouse",
    )
    + _group(
        "clothing",
        0.17,
        "shirt,hat,jacket,shoe,dress,tie,coat,helmet,glove,scarf,backpack,handbag",
        handheld="hat,glove,backpack,handbag,scarf",
    )
    + _group(
        "sports",
        0.15,
        "ball,tennis racket,skateboard,surfboard,kite,frisbee,skis,snowboard,"
        "baseball bat,baseball glove,golf club,basketball",
        handheld="ball,tennis racket,kite,frisbee,baseball bat,baseball glove,golf club,basketball",
        rideable="skateboard,surfboard,snowboard,skis",
    )
    + _group(
        "household",
        0.15,
        "book,lamp,pillow,blanket,vase,clock,mirror,towel,umbrella,suitcase,toothbrush,"
        "scissors,teddy bear,candle,basket",
        handheld="book,umbrella,toothbrush,scissors,teddy bear,candle,basket,towel",
    )
    + _group(
        "outdoor",
        0.17,
        "traffic light,fire hydrant,stop sign,street sign,parking meter,fence,pole,"
        "mailbox,flag,statue,fountain,tent",
    )
    + _group("plant", 0.26, "tree,flower,plant,bush,leaf,palm tree", handheld="flower,leaf")
    + [
        ObjectClass(name, "scenery", 0.8, background=True)
        for name in (
            "sky,grass,wall,floor,road,water,building,mountain,beach,sand,snow,ceiling,"
            "window,door,sidewalk,cloud,field"
        ).split(",")
    ]
)

ATTRIBUTE_GROUPS: dict[str, tuple[str, ...]] = {
    "colour": (
        "red",
        "blue",
        "green",
        "yellow",
        "black",
        "white",
        "brown",
        "gray",
        "orange",
        "pink",
        "purple",
    ),
    "size": ("small", "large"),
    "material": ("wooden", "metal", "plastic", "glass", "leather", "ceramic"),
    "state": ("young", "old", "smiling", "standing", "sitting"),
}
ATTRIBUTES: tuple[str, ...] = tuple(a for values in ATTRIBUTE_GROUPS.values() for a in values)

RELATIONS: tuple[str, ...] = ("on", "under", "next to", "holding", "riding")

_MATERIAL_SUPERCATEGORIES = ("furniture", "kitchenware", "household", "outdoor")

_IRREGULAR_PLURALS = {
    "man": "men",
    "woman": "women",
    "child": "children",
    "person": "people",
    "sheep": "sheep",
    "deer": "deer",
    "fish": "fish",
    "computer mouse": "computer mice",
    "knife": "knives",
    "shelf": "shelves",
    "bookshelf": "bookshelves",
    "leaf": "leaves",
    "scarf": "scarves",
    "skis": "pairs of skis",
    "scissors": "pairs of scissors",
    "police officer": "police officers",
    "wine glass": "wine glasses",
    "bus": "buses",
    "tomato": "tomatoes",
    "broccoli": "pieces of broccoli",
    "bread": "loaves of bread",
    "cheese": "pieces of cheese",
    "soup": "bowls of soup",
}

NUMBER_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
)

CLASS_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(CLASSES)}
ATTRIBUTE_INDEX: dict[str, int] = {a: i for i, a in enumerate(ATTRIBUTES)}
FOREGROUND: tuple[int, ...] = tuple(i for i, c in enumerate(CLASSES) if not c.background)
BACKGROUND: tuple[int, ...] = tuple(i for i, c in enumerate(CLASSES) if c.background)
UNDER_ANCHORS = frozenset({"table", "desk", "bench", "bed", "counter"})


def plural(name: str) -> str:
    """English plural of a class name ("bus" -> "buses", "man" -> "men")."""
    if name in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[name]
    head, _, last = name.rpartition(" ")
    prefix = head + " " if head else ""
    if last in _IRREGULAR_PLURALS:
        return prefix + _IRREGULAR_PLURALS[last]
    if last.endswith(("s", "x", "ch", "sh")):
        return prefix + last + "es"
    if last.endswith("y") and last[-2:-1] not in "aeiou":
        return prefix + last[:-1] + "ies"
    return prefix + last + "s"


def article(word: str) -> str:
    """Indefinite article for ``word``."""
    return "an" if word[0] in "aeiou" else "a"


def attribute_groups(cls: ObjectClass) -> tuple[str, ...]:
    """Attribute groups an object of ``cls`` carries (one value per group)."""
    if cls.is_person:
        return ("state",)
    if cls.background:
        return ("colour",)
    groups: tuple[str, ...] = ("colour", "size")
    if cls.supercategory in _MATERIAL_SUPERCATEGORIES:
        groups += ("material",)
    return groups


def class_indices(predicate) -> list[int]:
    """Indices of classes for which ``predicate(cls)`` holds, in vocabulary order."""
    return [i for i, c in enumerate(CLASSES) if predicate(c)]


def can_relate(subject: ObjectClass, predicate: str, obj: ObjectClass) -> bool:
    """Whether ``subject predicate obj`` is a plausible relation of the world."""
    if subject.background or obj.background:
        return False
    if predicate == "holding":
        return subject.is_person and obj.handheld
    if predicate == "riding":
        return subject.is_person and obj.rideable
    small = subject.size <= 0.2 or subject.supercategory == "animal"
    if predicate == "on":
        return obj.surface and small and not subject.surface
    if predicate == "under":
        return obj.name in UNDER_ANCHORS and small and not subject.surface
    return predicate == "next to"


def is_coloured(cls: ObjectClass) -> bool:
    """A non-person class with a colour (what colour questions ask about)."""
    return "colour" in attribute_groups(cls) and not cls.is_person


def has_material(cls: ObjectClass) -> bool:
    """A class with a material attribute."""
    return "material" in attribute_groups(cls)


# Kinds of foreground class the downstream builders draw two distinct classes from; the
# items that can be "on" each active surface are checked as well (see ``_unmet_need``).
NEEDS: tuple[tuple[str, Callable[[ObjectClass], bool]], ...] = (
    ("person", lambda c: c.is_person),
    ("handheld", lambda c: c.handheld),
    ("rideable", lambda c: c.rideable),
    ("surface", lambda c: c.surface),
    ("coloured non-person", is_coloured),
    ("material", has_material),
)


def round_robin_foreground() -> tuple[int, ...]:
    """Every foreground class, taken round-robin over the supercategories in vocabulary
    order: the first class of each supercategory, then the second of each, ..."""
    groups: dict[str, list[int]] = {}
    for i in FOREGROUND:
        groups.setdefault(CLASSES[i].supercategory, []).append(i)
    depth = max(len(members) for members in groups.values())
    return tuple(
        members[r] for r in range(depth) for members in groups.values() if r < len(members)
    )


def _unmet_need(chosen: list[int]) -> Callable[[ObjectClass], bool] | None:
    """A kind of class ``chosen`` holds fewer than two of, or None when every need is met."""
    for _, need in NEEDS:
        if sum(need(CLASSES[c]) for c in chosen) < 2:
            return need
    for surface in chosen:
        on_it = partial(can_relate, predicate="on", obj=CLASSES[surface])
        if CLASSES[surface].surface and sum(on_it(CLASSES[c]) for c in chosen) < 2:
            return on_it
    return None


def _select_foreground(k: int) -> tuple[int, ...] | None:
    """``k`` foreground classes meeting :data:`NEEDS`, or None when ``k`` is too small.

    Classes pinned for an unmet need come first, the round-robin order fills the other
    places; each unmet need pins its first missing class in vocabulary order.
    """
    order = round_robin_foreground()
    pinned: list[int] = []
    while True:
        chosen = pinned + [c for c in order if c not in pinned][: k - len(pinned)]
        need = _unmet_need(chosen)
        if need is None:
            return tuple(sorted(chosen))
        if len(pinned) == k:
            return None
        pinned.append(next(c for c in FOREGROUND if need(CLASSES[c]) and c not in chosen))


NEEDS_TEXT = (
    "the downstream tasks need two classes of each kind "
    f"({', '.join(name for name, _ in NEEDS)}) and two that can be on each surface"
)
MIN_FOREGROUND_CLASSES = next(
    k for k in range(1, len(FOREGROUND) + 1) if _select_foreground(k) is not None
)


@dataclass(frozen=True)
class ClassSet:
    """The classes a world draws from: ``foreground`` (indices in vocabulary order) and
    every background class. The kinds below are the active classes of each kind."""

    foreground: tuple[int, ...]

    @classmethod
    def of_size(cls, k: int) -> "ClassSet":
        """``k`` foreground classes (0: all of them), a fixed function of ``k``.

        The first ``k`` classes of :func:`round_robin_foreground`, except that classes
        the downstream tasks need (:data:`NEEDS`, two of each kind) take the places of
        the last ones when the round-robin classes lack them.
        """
        if k == 0:
            return cls(FOREGROUND)
        chosen = _select_foreground(k) if k <= len(FOREGROUND) else None
        if chosen is None:
            raise ValueError(
                f"expected 0 (every foreground class) or {MIN_FOREGROUND_CLASSES}"
                f" to {len(FOREGROUND)} foreground classes, got {k}: "
                f"{NEEDS_TEXT}"
            )
        return cls(chosen)

    def first(self, k: int) -> "ClassSet":
        """The first ``k`` of these foreground classes in round-robin order (all when ``k``
        is 0 or at least their number), in vocabulary order."""
        if not 0 < k < len(self.foreground):
            return self
        ordered = [c for c in round_robin_foreground() if c in self.foreground]
        return ClassSet(tuple(sorted(ordered[:k])))

    def where(self, predicate: Callable[[ObjectClass], bool]) -> tuple[int, ...]:
        """Active foreground classes for which ``predicate(cls)`` holds."""
        return tuple(c for c in self.foreground if predicate(CLASSES[c]))

    @cached_property
    def active(self) -> tuple[int, ...]:
        """Every class the world uses, foreground and background, in vocabulary order."""
        return tuple(sorted(self.foreground + BACKGROUND))

    @cached_property
    def persons(self) -> tuple[int, ...]:
        return self.where(lambda c: c.is_person)

    @cached_property
    def non_person(self) -> tuple[int, ...]:
        return self.where(lambda c: not c.is_person)

    @cached_property
    def coloured(self) -> tuple[int, ...]:
        return self.where(is_coloured)

    @cached_property
    def material(self) -> tuple[int, ...]:
        return self.where(has_material)

    @cached_property
    def handheld(self) -> tuple[int, ...]:
        return self.where(lambda c: c.handheld)

    @cached_property
    def rideable(self) -> tuple[int, ...]:
        return self.where(lambda c: c.rideable)

    @cached_property
    def surfaces(self) -> tuple[int, ...]:
        return self.where(lambda c: c.surface)

    def on_items(self, surface: int) -> tuple[int, ...]:
        """Active classes that can be "on" ``surface``."""
        return self.where(lambda c: can_relate(c, "on", CLASSES[surface]))

    def foreground_except(self, cls: int) -> list[int]:
        """Active foreground classes other than ``cls``."""
        return [c for c in self.foreground if c != cls]

    @cached_property
    def _supercategory_members(self) -> dict[str, tuple[int, ...]]:
        members: dict[str, list[int]] = {}
        for i in self.active:
            members.setdefault(CLASSES[i].supercategory, []).append(i)
        return {name: tuple(m) for name, m in members.items()}

    def confusions(self, cls: int) -> list[int]:
        """What a detector may mistake ``cls`` for: the other active classes of its
        supercategory, or any other active foreground class when it has none."""
        members = self._supercategory_members.get(CLASSES[cls].supercategory, ())
        return [c for c in members if c != cls] or self.foreground_except(cls)

    @property
    def names(self) -> list[str]:
        """Names of the active classes, in vocabulary order."""
        return [CLASSES[i].name for i in self.active]


def vocabulary_json(classes: ClassSet) -> dict:
    """The vocabulary as written to ``vocabulary.json``; ``active``: used by the world."""
    active = set(classes.active)
    return {
        "background_label": BACKGROUND_LABEL,
        "classes": [
            {
                "id": i,
                "name": c.name,
                "plural": plural(c.name),
                "supercategory": c.supercategory,
                "background": c.background,
                "active": i in active,
                "handheld": c.handheld,
                "surface": c.surface,
                "rideable": c.rideable,
                "attribute_groups": list(attribute_groups(c)),
            }
            for i, c in enumerate(CLASSES)
        ],
        "attribute_groups": {g: list(v) for g, v in ATTRIBUTE_GROUPS.items()},
        "attributes": list(ATTRIBUTES),
        "relations": list(RELATIONS),
    }
