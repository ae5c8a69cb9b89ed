"""Ground-truth scenes: image size, objects with boxes and attributes, relations.

A :class:`SceneSpec` states what a scene must contain (the downstream builders use it
to make an answer true or false); :func:`sample_scene` fills the rest at random.
Relations are explicit: an object is related to another only when a relation says so,
and its box is then placed accordingly ("cup on table": the cup stands on the table top).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mmf_uvlp.toy_world.vocabulary import (
    ATTRIBUTE_GROUPS,
    BACKGROUND,
    CLASSES,
    UNDER_ANCHORS,
    ClassSet,
    attribute_groups,
    can_relate,
)

MIN_OBJECTS = 3
MAX_OBJECTS = 10
MIN_BOX_SIDE = 4.0

_TOP_BAND = {"sky", "cloud", "ceiling", "mountain"}
_BOTTOM_BAND = {"grass", "floor", "road", "water", "beach", "sand", "snow", "sidewalk", "field"}


@dataclass
class SceneObject:
    """One ground-truth object; ``box`` is [x1, y1, x2, y2] in pixels."""

    cls: int
    attrs: dict[str, str]
    box: list[float]
    locked: bool = False  # part of a constraint: random relations never attach to it

    @property
    def name(self) -> str:
        return CLASSES[self.cls].name

    @property
    def background(self) -> bool:
        return CLASSES[self.cls].background

    def to_json(self, index: int) -> dict:
        return {
            "id": index,
            "class": self.name,
            "attributes": dict(self.attrs),
            "box": list(self.box),
            "background": self.background,
        }


@dataclass
class Scene:
    """A ground-truth image: foreground objects first, then background regions."""

    image_id: str
    width: int
    height: int
    objects: list[SceneObject]
    relations: list[tuple[int, str, int]]  # (subject index, predicate, object index)

    def foreground(self) -> list[int]:
        return [i for i, o in enumerate(self.objects) if not o.background]

    def instances(self, cls: int) -> list[int]:
        return [i for i, o in enumerate(self.objects) if o.cls == cls]

    def count(self, cls: int) -> int:
        return len(self.instances(cls))

    def related(self, subject: int, predicate: str) -> list[int]:
        """Objects that ``subject`` stands in ``predicate`` to."""
        return [o for s, p, o in self.relations if s == subject and p == predicate]

    def to_json(self) -> dict:
        return {
            "image_id": self.image_id,
            "width": self.width,
            "height": self.height,
            "objects": [o.to_json(i) for i, o in enumerate(self.objects)],
            "relations": [
                {"subject": s, "predicate": p, "object": o} for s, p, o in self.relations
            ],
        }


@dataclass
class ObjectSpec:
    """A required object: its class and the attributes that are fixed."""

    cls: int
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass
class SceneSpec:
    """Constraints on a scene.

    ``exact`` classes appear exactly as often as in ``objects``; ``forbidden`` classes
    never appear; ``relations`` index into ``objects``.
    """

    objects: list[ObjectSpec] = field(default_factory=list)
    relations: list[tuple[int, str, int]] = field(default_factory=list)
    exact: set[int] = field(default_factory=set)
    forbidden: set[int] = field(default_factory=set)

    def add(self, cls: int, **attrs: str) -> int:
        """Require one more object of ``cls``; returns its index."""
        self.objects.append(ObjectSpec(cls, dict(attrs)))
        return len(self.objects) - 1

    def mentioned(self) -> set[int]:
        """Classes this spec constrains in any way."""
        return {o.cls for o in self.objects} | self.exact | self.forbidden

    def compatible(self, other: "SceneSpec") -> bool:
        """Whether ``other`` can be merged into this spec without contradiction."""
        return (
            not (self.mentioned() & other.mentioned())
            and len(self.objects) + len(other.objects) <= MAX_OBJECTS
        )

    def merge(self, other: "SceneSpec") -> None:
        """Add the constraints of ``other`` (which must be :meth:`compatible`)."""
        offset = len(self.objects)
        self.objects.extend(other.objects)
        self.relations.extend((s + offset, p, o + offset) for s, p, o in other.relations)
        self.exact |= other.exact
        self.forbidden |= other.forbidden


def dependent_role(predicate: str) -> str:
    """Which side of a relation is placed relative to the other one."""
    return "object" if predicate in ("holding", "riding") else "subject"


def _sample_attrs(rng: np.random.Generator, cls: int, fixed: dict[str, str]) -> dict[str, str]:
    attrs = {}
    for group in attribute_groups(CLASSES[cls]):
        values = ATTRIBUTE_GROUPS[group]
        attrs[group] = fixed.get(group) or values[int(rng.integers(len(values)))]
    unknown = set(fixed) - set(attrs)
    if unknown:
        raise ValueError(
            f"class {CLASSES[cls].name!r} has no attribute group(s) {sorted(unknown)}; "
            f"expected a subset of {list(attribute_groups(CLASSES[cls]))}"
        )
    return attrs


def _box_size(rng: np.random.Generator, cls: int, attrs: dict[str, str], w: int, h: int):
    scale = CLASSES[cls].size * rng.uniform(0.7, 1.3)
    scale *= {"small": 0.6, "large": 1.5}.get(attrs.get("size", ""), 1.0)
    aspect = rng.uniform(0.7, 1.4)
    bw = min(scale * w * aspect, 0.95 * w)
    bh = min(scale * h / aspect, 0.95 * h)
    return max(bw, MIN_BOX_SIDE * 2), max(bh, MIN_BOX_SIDE * 2)


def clip_box(box, w: int, h: int) -> list[float]:
    """Clip [x1, y1, x2, y2] into the image, keep a minimal size, round to 0.01 px."""
    x1, y1, x2, y2 = (float(v) for v in box)
    x1 = min(max(x1, 0.0), w - MIN_BOX_SIDE)
    y1 = min(max(y1, 0.0), h - MIN_BOX_SIDE)
    x2 = min(max(x2, x1 + MIN_BOX_SIDE), float(w))
    y2 = min(max(y2, y1 + MIN_BOX_SIDE), float(h))
    return [round(x1, 2), round(y1, 2), round(x2, 2), round(y2, 2)]


def _place_free(rng, size, w, h) -> list[float]:
    bw, bh = size
    x1 = rng.uniform(0, w - bw)
    y1 = rng.uniform(0, h - bh)
    return [x1, y1, x1 + bw, y1 + bh]


def _place_relative(rng, predicate, anchor, size, w, h) -> list[float]:
    """Box of the dependent object of ``predicate`` given the anchor's box."""
    ax1, ay1, ax2, ay2 = anchor
    aw, ah = ax2 - ax1, ay2 - ay1
    bw, bh = size
    if predicate == "holding":
        bw, bh = min(bw, 0.6 * aw), min(bh, 0.4 * ah)
        cx = ax1 + rng.uniform(0.2, 0.8) * aw
        cy = ay1 + rng.uniform(0.45, 0.7) * ah
        return [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
    if predicate == "riding":
        bw = max(bw, 1.2 * aw)
        top = ay1 + rng.uniform(0.5, 0.7) * ah
        cx = (ax1 + ax2) / 2 + rng.uniform(-0.1, 0.1) * aw
        return [cx - bw / 2, top, cx + bw / 2, top + bh]
    if predicate == "on":
        bw = min(bw, 0.8 * aw)
        bottom = ay1 + rng.uniform(0.05, 0.25) * ah
        cx = ax1 + rng.uniform(0.25, 0.75) * aw
        return [cx - bw / 2, bottom - bh, cx + bw / 2, bottom]
    if predicate == "under":
        bw, bh = min(bw, 0.7 * aw), min(bh, 0.6 * ah)
        bottom = ay2 - rng.uniform(0.0, 0.05) * ah
        cx = ax1 + rng.uniform(0.3, 0.7) * aw
        return [cx - bw / 2, bottom - bh, cx + bw / 2, bottom]
    # next to: same ground line, left or right of the anchor
    gap = rng.uniform(0.0, 0.05) * w
    bottom = ay2 + rng.uniform(-0.1, 0.1) * ah
    if rng.random() < 0.5:
        return [ax1 - gap - bw, bottom - bh, ax1 - gap, bottom]
    return [ax2 + gap, bottom - bh, ax2 + gap + bw, bottom]


def _background_box(rng, name, w, h) -> list[float]:
    if name in _TOP_BAND:
        return [0.0, 0.0, float(w), rng.uniform(0.2, 0.45) * h]
    if name in _BOTTOM_BAND:
        return [0.0, rng.uniform(0.55, 0.8) * h, float(w), float(h)]
    bw, bh = rng.uniform(0.4, 0.9) * w, rng.uniform(0.4, 0.9) * h
    return _place_free(rng, (bw, bh), w, h)


def _random_relation(rng, objects, allowed) -> tuple[int, str, int] | None:
    """A random (anchor, predicate, dependent class) for a filler, or None."""
    anchors = [i for i, o in enumerate(objects) if not o.locked]
    if not anchors:
        return None
    anchor = anchors[int(rng.integers(len(anchors)))]
    anchor_cls = CLASSES[objects[anchor].cls]
    predicates = ["next to"]
    if anchor_cls.is_person:
        predicates += ["holding", "riding"]
    if anchor_cls.surface:
        predicates += ["on"]
    if anchor_cls.name in UNDER_ANCHORS:
        predicates += ["under"]
    predicate = predicates[int(rng.integers(len(predicates)))]
    if dependent_role(predicate) == "object":
        ok = [c for c in allowed if can_relate(anchor_cls, predicate, CLASSES[c])]
    else:
        ok = [c for c in allowed if can_relate(CLASSES[c], predicate, anchor_cls)]
    if not ok:
        return None
    return anchor, predicate, ok[int(rng.integers(len(ok)))]


def sample_scene(
    rng: np.random.Generator,
    classes: ClassSet,
    image_id: str,
    spec: SceneSpec | None = None,
    relation_rate: float = 0.35,
) -> Scene:
    """Sample a scene satisfying ``spec``, filled with random objects and relations.

    The spec's objects come first, in order (object ``i`` of the spec is object ``i`` of
    the scene), then random objects of ``classes.foreground`` (fewer when the spec rules
    out every one), then 1-3 background regions.
    """
    spec = spec or SceneSpec()
    w, h = int(rng.integers(320, 801)), int(rng.integers(240, 641))
    objects = [
        SceneObject(o.cls, _sample_attrs(rng, o.cls, o.attrs), [], locked=True)
        for o in spec.objects
    ]
    relations = list(spec.relations)
    anchor_of: dict[int, tuple[int, str]] = {}
    for s, p, o in relations:
        dep, anc = (o, s) if dependent_role(p) == "object" else (s, o)
        if dep in anchor_of:
            raise ValueError(f"object {dep} of a scene spec is placed by two relations")
        anchor_of[dep] = (anc, p)

    n_total = int(rng.integers(max(MIN_OBJECTS, len(objects)), MAX_OBJECTS + 1))
    allowed = [c for c in classes.foreground if c not in spec.exact and c not in spec.forbidden]
    while allowed and len(objects) < n_total:
        rel = _random_relation(rng, objects, allowed) if rng.random() < relation_rate else None
        if rel is None:
            cls = allowed[int(rng.integers(len(allowed)))]
            objects.append(SceneObject(cls, _sample_attrs(rng, cls, {}), []))
            continue
        anchor, predicate, cls = rel
        objects.append(SceneObject(cls, _sample_attrs(rng, cls, {}), []))
        dep = len(objects) - 1
        anchor_of[dep] = (anchor, predicate)
        relations.append(
            (anchor, predicate, dep)
            if dependent_role(predicate) == "object"
            else (dep, predicate, anchor)
        )

    # place free objects first, then dependents once their anchor is placed
    pending = list(range(len(objects)))
    while pending:
        progressed = False
        for i in list(pending):
            size = _box_size(rng, objects[i].cls, objects[i].attrs, w, h)
            if i not in anchor_of:
                objects[i].box = clip_box(_place_free(rng, size, w, h), w, h)
            elif objects[anchor_of[i][0]].box:
                anc, pred = anchor_of[i]
                box = _place_relative(rng, pred, objects[anc].box, size, w, h)
                objects[i].box = clip_box(box, w, h)
            else:
                continue
            pending.remove(i)
            progressed = True
        if not progressed:
            raise ValueError(f"scene spec for {image_id} has a cycle of relations")

    names = list(BACKGROUND)
    for _ in range(int(rng.integers(1, 4))):
        cls = names.pop(int(rng.integers(len(names))))
        attrs = _sample_attrs(rng, cls, {})
        box = clip_box(_background_box(rng, CLASSES[cls].name, w, h), w, h)
        objects.append(SceneObject(cls, attrs, box))
    return Scene(image_id, w, h, objects, relations)
