"""The toy world's vocabulary: object classes, attributes and relations.

Class indices are positions in :data:`CLASSES` and are what the MMF feature files
store in ``objects``; ``cls_prob`` has one more column, index 0 = background.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        "person", 0.42,
        "man,woman,boy,girl,child,baby,person,player,skier,surfer,skateboarder,chef,"
        "police officer",
    )
    + _group(
        "animal", 0.32,
        "dog,cat,horse,cow,sheep,bird,elephant,zebra,giraffe,bear,duck,goat,pig,rabbit,"
        "deer,chicken,lion,monkey,pigeon,squirrel",
        rideable="horse,elephant",
    )
    + _group(
        "vehicle", 0.36,
        "car,bus,truck,bicycle,motorcycle,train,airplane,boat,van,taxi,scooter,tractor,"
        "helicopter,ambulance,cart,wagon",
        rideable="bicycle,motorcycle,scooter,boat,cart,wagon",
    )
    + _group(
        "furniture", 0.32,
        "chair,couch,table,bed,bench,desk,shelf,cabinet,dresser,stool,armchair,"
        "bookshelf,sofa,counter,nightstand",
        surface="table,bed,bench,desk,shelf,counter,nightstand,dresser,couch,sofa",
    )
    + _group(
        "food", 0.15,
        "pizza,sandwich,banana,apple,orange,cake,donut,broccoli,carrot,hot dog,"
        "hamburger,bread,cheese,egg,tomato,strawberry,lemon,cookie,salad,soup",
        handheld="sandwich,banana,apple,orange,donut,carrot,hot dog,hamburger,cookie",
    )
    + _group(
        "kitchenware", 0.14,
        "cup,bowl,plate,fork,knife,spoon,bottle,wine glass,mug,pot,pan,teapot,jar,"
        "cutting board",
        handheld="cup,fork,knife,spoon,bottle,wine glass,mug,jar",
    )
    + _group(
        "electronics", 0.18,
        "television,laptop,cell phone,keyboard,computer mouse,remote,monitor,camera,"
        "microwave,oven,refrigerator,speaker",
        handheld="cell phone,remote,camera,computer mouse",
    )
    + _group(
        "clothing", 0.17,
        "shirt,hat,jacket,shoe,dress,tie,coat,helmet,glove,scarf,backpack,handbag",
        handheld="hat,glove,backpack,handbag,scarf",
    )
    + _group(
        "sports", 0.15,
        "ball,tennis racket,skateboard,surfboard,kite,frisbee,skis,snowboard,"
        "baseball bat,baseball glove,golf club,basketball",
        handheld="ball,tennis racket,kite,frisbee,baseball bat,baseball glove,golf club,"
        "basketball",
        rideable="skateboard,surfboard,snowboard,skis",
    )
    + _group(
        "household", 0.15,
        "book,lamp,pillow,blanket,vase,clock,mirror,towel,umbrella,suitcase,toothbrush,"
        "scissors,teddy bear,candle,basket",
        handheld="book,umbrella,toothbrush,scissors,teddy bear,candle,basket,towel",
    )
    + _group(
        "outdoor", 0.17,
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
        "red", "blue", "green", "yellow", "black", "white", "brown", "gray", "orange",
        "pink", "purple",
    ),
    "size": ("small", "large"),
    "material": ("wooden", "metal", "plastic", "glass", "leather", "ceramic"),
    "state": ("young", "old", "smiling", "standing", "sitting"),
}
ATTRIBUTES: tuple[str, ...] = tuple(a for values in ATTRIBUTE_GROUPS.values() for a in values)

RELATIONS: tuple[str, ...] = ("on", "under", "next to", "holding", "riding")

_MATERIAL_SUPERCATEGORIES = ("furniture", "kitchenware", "household", "outdoor")

_IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "child": "children", "person": "people",
    "sheep": "sheep", "deer": "deer", "fish": "fish", "computer mouse": "computer mice",
    "knife": "knives", "shelf": "shelves", "bookshelf": "bookshelves", "leaf": "leaves",
    "scarf": "scarves", "skis": "pairs of skis", "scissors": "pairs of scissors",
    "police officer": "police officers", "wine glass": "wine glasses", "bus": "buses",
    "tomato": "tomatoes", "broccoli": "pieces of broccoli", "bread": "loaves of bread",
    "cheese": "pieces of cheese", "soup": "bowls of soup",
}

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                "nine", "ten")

CLASS_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(CLASSES)}
ATTRIBUTE_INDEX: dict[str, int] = {a: i for i, a in enumerate(ATTRIBUTES)}


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


def vocabulary_json() -> dict:
    """The vocabulary as written to ``vocabulary.json``."""
    return {
        "background_label": BACKGROUND_LABEL,
        "classes": [
            {
                "id": i,
                "name": c.name,
                "plural": plural(c.name),
                "supercategory": c.supercategory,
                "background": c.background,
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
