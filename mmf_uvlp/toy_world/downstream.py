"""Downstream tasks of the world: VQA2, NLVR2, visual entailment and RefCOCO+.

Every example is drawn *answer first*: the question type, its wording and its answer are
sampled independently, then a scene is built that makes the answer true
(:class:`~mmf_uvlp.toy_world.scene.SceneSpec`). The text therefore carries no
information about the answer beyond the answer type, and a text-only model stays at the
per-type majority rate; the answer can only be read off the regions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mmf_uvlp.tasks import REFCOCO_PLUS_SPLITS
from mmf_uvlp.toy_world.scene import Scene, SceneSpec
from mmf_uvlp.toy_world.text import caption, tokenize
from mmf_uvlp.toy_world.vocabulary import (
    ATTRIBUTE_GROUPS,
    CLASSES,
    NUMBER_WORDS,
    ClassSet,
    article,
    attribute_groups,
    plural,
)

SceneMaker = Callable[[str, SceneSpec], Scene]

VQA_SPLITS = ("train", "val", "test")
NLVR2_SPLITS = {"train": "train", "val": "dev", "test": "test1"}
VE_SPLITS = ("train", "val", "test")
REFCOCO_SPLITS = ("train",) + REFCOCO_PLUS_SPLITS
COCO_PREFIX = {"train": "COCO_train2014", "val": "COCO_val2014", "test": "COCO_test2015"}
VE_LABELS = ("entailment", "neutral", "contradiction")
MAX_TRIES = 50


def _pick(rng: np.random.Generator, options):
    return options[int(rng.integers(len(options)))]


def _other(rng: np.random.Generator, options, not_this):
    return _pick(rng, [o for o in options if o != not_this])


class IdAllocator:
    """Unique random integer ids (COCO image ids, Flickr ids) from one generator."""

    def __init__(self, rng: np.random.Generator, low: int, high: int):
        self.rng, self.low, self.high = rng, low, high
        self.used: set[int] = set()

    def __call__(self) -> int:
        while True:
            value = int(self.rng.integers(self.low, self.high))
            if value not in self.used:
                self.used.add(value)
                return value


@dataclass
class Draw:
    """A sampled example before its classes are chosen: kind, answer and wording."""

    kind: str
    answer: object
    variant: int


def _pack(
    rng: np.random.Generator,
    classes: ClassSet,
    draws: list[Draw],
    per_image: int,
    realize: Callable[[np.random.Generator, ClassSet, Draw], tuple[SceneSpec, dict]],
) -> list[tuple[SceneSpec, list[dict]]]:
    """Group draws into images: each image takes up to ``per_image`` compatible draws.

    Only the classes of a draw are re-sampled when it conflicts with the image's other
    draws, so answers stay independent of the text.
    """
    images: list[tuple[SceneSpec, list[dict]]] = []
    spec, records = SceneSpec(), []
    for draw in draws:
        for _ in range(MAX_TRIES):
            part, record = realize(rng, classes, draw)
            if spec.compatible(part):
                break
        else:
            images.append((spec, records))
            spec, records = SceneSpec(), []
            part, record = realize(rng, classes, draw)
        spec.merge(part)
        records.append(record)
        if len(records) == per_image:
            images.append((spec, records))
            spec, records = SceneSpec(), []
    if records:
        images.append((spec, records))
    return images


# ----------------------------------------------------------------------------- VQA2

VQA_TYPES = ("presence", "counting", "colour", "other")
_OTHER_KINDS = ("holding", "on", "riding", "material")
# question_type of a record: presence, counting, colour or one of the "other" kinds
QUESTION_TYPES = VQA_TYPES[:3] + _OTHER_KINDS
ANSWER_TYPES = {"presence": "yes/no", "counting": "number"}


def _vqa_draw(rng: np.random.Generator, classes: ClassSet) -> Draw:
    kind = _pick(rng, VQA_TYPES)
    if kind == "presence":
        return Draw(kind, _pick(rng, ("yes", "no")), int(rng.integers(3)))
    if kind == "counting":
        return Draw(kind, int(rng.integers(1, 5)), int(rng.integers(3)))
    if kind == "colour":
        return Draw(kind, _pick(rng, ATTRIBUTE_GROUPS["colour"]), int(rng.integers(3)))
    sub = _pick(rng, _OTHER_KINDS)
    options = {
        "holding": classes.handheld,
        "riding": classes.rideable,
        "on": None,
        "material": ATTRIBUTE_GROUPS["material"],
    }[sub]
    answer = _pick(rng, options) if options is not None else None
    return Draw(f"other:{sub}", answer, int(rng.integers(2)))


def _vqa_realize(rng: np.random.Generator, classes: ClassSet, draw: Draw) -> tuple[SceneSpec, dict]:
    spec = SceneSpec()
    v = draw.variant
    if draw.kind == "presence":
        cls = _pick(rng, classes.foreground)
        name = CLASSES[cls].name
        question = (
            f"Is there {article(name)} {name} in the picture?",
            f"Is there {article(name)} {name}?",
            f"Are there any {plural(name)}?",
        )[v]
        if draw.answer == "yes":
            spec.add(cls)
        else:
            spec.forbidden.add(cls)
        answer = draw.answer
    elif draw.kind == "counting":
        cls = _pick(rng, classes.foreground)
        many = plural(CLASSES[cls].name)
        question = (
            f"How many {many} are there?",
            f"How many {many} are in the picture?",
            f"How many {many} can you see?",
        )[v]
        for _ in range(draw.answer):
            spec.add(cls)
        spec.exact.add(cls)
        answer = str(draw.answer)
    elif draw.kind == "colour":
        cls = _pick(rng, classes.coloured)
        name = CLASSES[cls].name
        question = (
            f"What color is the {name}?",
            f"What is the color of the {name}?",
            f"Which color is the {name}?",
        )[v]
        spec.add(cls, colour=draw.answer)
        spec.exact.add(cls)
        answer = draw.answer
    else:
        sub = draw.kind.split(":")[1]
        if sub in ("holding", "riding"):
            person = _pick(rng, classes.persons)
            p, x = spec.add(person), spec.add(draw.answer)
            spec.relations.append((p, sub, x))
            spec.exact.add(person)
            name = CLASSES[person].name
            question = (f"What is the {name} {sub}?", f"What is this {name} {sub}?")[v]
            answer = CLASSES[draw.answer].name
        elif sub == "on":
            surface = _pick(rng, classes.surfaces)
            item = _pick(rng, classes.on_items(surface))
            s, x = spec.add(surface), spec.add(item)
            spec.relations.append((x, "on", s))
            spec.exact.add(surface)
            name = CLASSES[surface].name
            question = (f"What is on the {name}?", f"What is lying on the {name}?")[v]
            answer = CLASSES[item].name
        else:
            cls = _pick(rng, classes.material)
            spec.add(cls, material=draw.answer)
            spec.exact.add(cls)
            name = CLASSES[cls].name
            question = (f"What is the {name} made of?", f"What material is the {name}?")[v]
            answer = draw.answer
    question_type = draw.kind.split(":")[-1]
    return spec, {
        "question_str": question,
        "answer": answer,
        "question_type": question_type,
        "answer_type": ANSWER_TYPES.get(question_type, "other"),
    }


def _vqa_answers(rng: np.random.Generator, answer: str, kind: str) -> list[str]:
    """Ten annotator answers: mostly the true one, sometimes a plausible alternative."""
    answers = [answer] * 10
    if rng.random() < 0.25:
        alternatives = {
            "presence": ["yes", "no"],
            "counting": ["1", "2", "3", "4", "5"],
            "colour": list(ATTRIBUTE_GROUPS["colour"]),
        }.get(kind, [answer])
        for k in rng.choice(10, size=int(rng.integers(1, 4)), replace=False):
            answers[int(k)] = _pick(rng, alternatives)
    return answers


def vqa_answer_vocabulary() -> list[str]:
    """Every answer the world's VQA questions can have, in a fixed order."""
    words = ["yes", "no"] + [str(n) for n in range(0, 11)]
    words += list(ATTRIBUTE_GROUPS["colour"]) + list(ATTRIBUTE_GROUPS["material"])
    words += [c.name for c in CLASSES if not c.background]
    return list(dict.fromkeys(words))


def build_vqa2(
    rng: np.random.Generator,
    classes: ClassSet,
    questions: dict[str, int],
    make_scene: SceneMaker,
    coco_ids: IdAllocator,
    per_image: int = 3,
) -> tuple[list[Scene], dict[str, list[dict]]]:
    """VQA2 imdb records per split (train/val/test) about ``classes``, and their scenes."""
    scenes, splits = [], {}
    for split in VQA_SPLITS:
        draws = [_vqa_draw(rng, classes) for _ in range(questions[split])]
        records = []
        for spec, items in _pack(rng, classes, draws, per_image, _vqa_realize):
            image_id = coco_ids()
            name = f"{COCO_PREFIX[split]}_{image_id:012d}"
            scenes.append(make_scene(name, spec))
            for k, item in enumerate(items):
                answers = _vqa_answers(rng, item["answer"], item["question_type"])
                records.append(
                    {
                        "image_name": name,
                        "image_id": image_id,
                        "feature_path": f"{name}.npy",
                        "question_id": image_id * 10 + k,
                        "question_str": item["question_str"],
                        "question_tokens": tokenize(item["question_str"]),
                        "question_type": item["question_type"],
                        "answer_type": item["answer_type"],
                        "answers": answers,
                        "all_answers": list(answers),
                    }
                )
        splits[split] = records
    return scenes, splits


# ----------------------------------------------------------------------------- NLVR2

NLVR2_KINDS = ("count_side", "total", "both_colour", "one_not_other", "relation")
# statements about whether each image shows an object, and nothing else: read with the
# word -> region binding of pre-training, where the kinds above also need counting,
# colours or relations
NLVR2_PRESENCE_KINDS = ("side_presence", "both_present", "one_not_other")
NLVR2_STATEMENTS = {"mixed": NLVR2_KINDS, "presence": NLVR2_PRESENCE_KINDS}


def _count_phrase(n: int, cls: int) -> str:
    name = CLASSES[cls].name
    return f"exactly one {name}" if n == 1 else f"exactly {NUMBER_WORDS[n]} {plural(name)}"


def _with_count(spec: SceneSpec, cls: int, n: int) -> None:
    for _ in range(n):
        spec.add(cls)
    spec.exact.add(cls)
    if n == 0:
        spec.forbidden.add(cls)


def _shown_if(rng: np.random.Generator, spec: SceneSpec, cls: int, shown: bool) -> None:
    """One or two ``cls`` objects in ``spec`` if ``shown``, none otherwise."""
    _with_count(spec, cls, int(rng.integers(1, 3)) if shown else 0)


def _nlvr2_example(rng: np.random.Generator, classes: ClassSet, kind: str, label: bool):
    """(sentence, left spec, right spec) of one NLVR2 statement with truth ``label``."""
    left, right = SceneSpec(), SceneSpec()
    if kind == "count_side":
        cls, n = _pick(rng, classes.foreground), int(rng.integers(1, 5))
        side = _pick(rng, ("left", "right"))
        sentence = _pick(
            rng,
            (
                f"The {side} image contains {_count_phrase(n, cls)}.",
                f"There are {_count_phrase(n, cls)} in the {side} image.",
            ),
        )
        shown = n if label else _other(rng, range(0, 5), n)
        target, other = (left, right) if side == "left" else (right, left)
        _with_count(target, cls, shown)
        _with_count(other, cls, int(rng.integers(0, 5)))
    elif kind == "total":
        cls, n = _pick(rng, classes.foreground), int(rng.integers(2, 6))
        many = plural(CLASSES[cls].name)
        sentence = _pick(
            rng,
            (
                f"There are {NUMBER_WORDS[n]} {many} in total.",
                f"The two images contain {NUMBER_WORDS[n]} {many} in total.",
            ),
        )
        total = n if label else n + _pick(rng, (-1, 1))
        k = int(rng.integers(max(0, total - 4), min(4, total) + 1))
        _with_count(left, cls, k)
        _with_count(right, cls, total - k)
    elif kind == "both_colour":
        cls, colour = _pick(rng, classes.coloured), _pick(rng, ATTRIBUTE_GROUPS["colour"])
        phrase = f"{colour} {CLASSES[cls].name}"
        sentence = _pick(
            rng,
            (
                f"Both images contain {article(phrase)} {phrase}.",
                f"Each image shows {article(phrase)} {phrase}.",
            ),
        )
        wrong = _other(rng, ATTRIBUTE_GROUPS["colour"], colour)
        colours = [colour, colour] if label else [colour, wrong][:: _pick(rng, (1, -1))]
        for spec, c in zip((left, right), colours):
            spec.add(cls, colour=c)
            spec.exact.add(cls)
    elif kind == "side_presence":
        cls, side = _pick(rng, classes.foreground), _pick(rng, ("left", "right"))
        name = CLASSES[cls].name
        sentence = _pick(
            rng,
            (
                f"The {side} image contains {article(name)} {name}.",
                f"There is {article(name)} {name} in the {side} image.",
            ),
        )
        target, other = (left, right) if side == "left" else (right, left)
        _shown_if(rng, target, cls, label)
        _with_count(other, cls, int(rng.integers(0, 3)))
    elif kind == "both_present":
        cls = _pick(rng, classes.foreground)
        name = CLASSES[cls].name
        sentence = _pick(
            rng,
            (
                f"Both images contain {article(name)} {name}.",
                f"Each image shows {article(name)} {name}.",
            ),
        )
        present = (
            [True, True] if label else _pick(rng, ([True, False], [False, True], [False, False]))
        )
        for spec, has in zip((left, right), present):
            _shown_if(rng, spec, cls, has)
    elif kind == "one_not_other":
        cls = _pick(rng, classes.foreground)
        name = CLASSES[cls].name
        sentence = _pick(
            rng,
            (
                f"One image contains {article(name)} {name} and the other does not.",
                f"Only one of the images shows {article(name)} {name}.",
            ),
        )
        if label:
            present = [True, False][:: _pick(rng, (1, -1))]
        else:
            present = _pick(rng, ([True, True], [False, False]))
        for spec, has in zip((left, right), present):
            _shown_if(rng, spec, cls, has)
    else:
        person, held = _pick(rng, classes.persons), _pick(rng, classes.handheld)
        spare = _other(rng, classes.handheld, held)
        pname, hname = CLASSES[person].name, CLASSES[held].name
        sentence = _pick(
            rng,
            (
                f"In one of the images, {article(pname)} {pname} is holding {article(hname)} {hname}.",
                f"One image shows {article(pname)} {pname} holding {article(hname)} {hname}.",
            ),
        )
        target, other = (left, right)[:: _pick(rng, (1, -1))]
        p, x, y = target.add(person), target.add(held), target.add(spare)
        target.relations.append((p, "holding", x if label else y))
        target.exact |= {person, held, spare}
        other.forbidden.add(person)
    return sentence, left, right


def build_nlvr2(
    rng: np.random.Generator,
    classes: ClassSet,
    pairs: dict[str, int],
    make_scene: SceneMaker,
    kinds: tuple[str, ...] = NLVR2_KINDS,
    named: ClassSet | None = None,
    named_percent: int = 100,
) -> tuple[list[Scene], dict[str, list[dict]]]:
    """NLVR2 jsonl records per split (train/val/test) and their scenes (two per pair); each
    statement's kind is drawn uniformly from ``kinds``. A statement names one of ``named``
    (default: ``classes``) in ``named_percent`` percent of the pairs, drawn per pair (no draw
    at 100, so that those worlds keep their bytes), one of ``classes`` in the others."""
    named = classes if named is None else named
    scenes, splits = [], {}
    for split, name in NLVR2_SPLITS.items():
        records = []
        for k in range(pairs[split]):
            kind, label = _pick(rng, kinds), bool(rng.random() < 0.5)
            narrow = named_percent == 100 or rng.random() * 100 < named_percent
            sentence, left, right = _nlvr2_example(rng, named if narrow else classes, kind, label)
            stem = f"{name}-{1000 + k // 2}-{k % 2}"
            for side, spec in enumerate((left, right)):
                scenes.append(make_scene(f"{stem}-img{side}", spec))
            records.append(
                {
                    "identifier": f"{stem}-0",
                    "sentence": sentence,
                    "label": "True" if label else "False",
                    "left_url": f"toy://nlvr2/{stem}-img0.png",
                    "right_url": f"toy://nlvr2/{stem}-img1.png",
                    "statement_type": kind,
                }
            )
        splits[split] = records
    return scenes, splits


# ----------------------------------------------------------------------------- SNLI-VE

VE_KINDS = ("colour", "material", "holding", "on")


def _ve_draw(rng: np.random.Generator) -> Draw:
    return Draw(_pick(rng, VE_KINDS), _pick(rng, VE_LABELS), int(rng.integers(2)))


def _ve_realize(rng: np.random.Generator, classes: ClassSet, draw: Draw) -> tuple[SceneSpec, dict]:
    """A hypothesis about a definite object: absent object = neutral."""
    spec, label, v = SceneSpec(), draw.answer, draw.variant
    if draw.kind in ("colour", "material"):
        group = draw.kind
        cls = _pick(rng, classes.coloured if group == "colour" else classes.material)
        value = _pick(rng, ATTRIBUTE_GROUPS[group])
        name = CLASSES[cls].name
        sentence = (
            (f"The {name} is {value}.", f"The {name} in the picture is {value}.")[v]
            if group == "colour"
            else (f"The {name} is made of {value}.", f"The {name} is {value}.")[v]
        )
        if label == "neutral":
            spec.forbidden.add(cls)
        else:
            shown = value if label == "entailment" else _other(rng, ATTRIBUTE_GROUPS[group], value)
            spec.add(cls, **{group: shown})
            spec.exact.add(cls)
    elif draw.kind == "holding":
        person, held = _pick(rng, classes.persons), _pick(rng, classes.handheld)
        spare = _other(rng, classes.handheld, held)
        pname, hname = CLASSES[person].name, CLASSES[held].name
        sentence = (
            f"The {pname} is holding {article(hname)} {hname}.",
            f"The {pname} holds {article(hname)} {hname}.",
        )[v]
        if label == "neutral":
            spec.add(held)
            spec.add(spare)
            spec.forbidden.add(person)
        else:
            p, x, y = spec.add(person), spec.add(held), spec.add(spare)
            spec.relations.append((p, "holding", x if label == "entailment" else y))
            spec.exact.add(person)
        spec.exact |= {held, spare}
    else:
        surface = _pick(rng, classes.surfaces)
        items = classes.on_items(surface)
        item = _pick(rng, items)
        spare = _other(rng, items, item)
        iname, sname = CLASSES[item].name, CLASSES[surface].name
        sentence = (f"The {iname} is on the {sname}.", f"The {iname} lies on the {sname}.")[v]
        if label == "neutral":
            spec.add(item)
            spec.add(spare)
            spec.forbidden.add(surface)
        else:
            s, x, y = spec.add(surface), spec.add(item), spec.add(spare)
            spec.relations.append((x if label == "entailment" else y, "on", s))
            spec.exact.add(surface)
        spec.exact |= {item, spare}
    return spec, {"sentence2": sentence, "gold_label": label, "hypothesis_type": draw.kind}


def build_visual_entailment(
    rng: np.random.Generator,
    classes: ClassSet,
    hypotheses: dict[str, int],
    make_scene: SceneMaker,
    flickr_ids: IdAllocator,
    per_image: int = 3,
) -> tuple[list[Scene], dict[str, list[dict]]]:
    """SNLI-VE jsonl records per split (train/val/test) about ``classes``, and their scenes.

    ``sentence1`` (the premise caption) never names a class that a hypothesis of the
    same image is about, so the premise does not give the label away.
    """
    scenes, splits = [], {}
    for split in VE_SPLITS:
        draws = [_ve_draw(rng) for _ in range(hypotheses[split])]
        records = []
        for spec, items in _pack(rng, classes, draws, per_image, _ve_realize):
            image = f"{flickr_ids()}.jpg"
            scene = make_scene(image.split(".")[0], spec)
            scenes.append(scene)
            premise = caption(rng, scene, exclude=spec.mentioned())
            for k, item in enumerate(items):
                records.append(
                    {
                        "Flikr30kID": image,
                        "captionID": f"{image}#0",
                        "pairID": f"{image}#0r{k + 1}{item['gold_label'][0]}",
                        "sentence1": premise,
                        "sentence2": item["sentence2"],
                        "gold_label": item["gold_label"],
                        "annotator_labels": [item["gold_label"]],
                        "hypothesis_type": item["hypothesis_type"],
                    }
                )
        splits[split] = records
    return scenes, splits


# ----------------------------------------------------------------------------- RefCOCO+


@dataclass
class ReferWorld:
    """RefCOCO+ in the refer layout: refs plus COCO-style instances."""

    refs: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    annotations: list[dict] = field(default_factory=list)

    def instances_json(self) -> dict:
        categories = [
            {"id": i + 1, "name": c.name, "supercategory": c.supercategory}
            for i, c in enumerate(CLASSES)
            if not c.background
        ]
        return {
            "info": {"description": "mmf_uvlp toy world RefCOCO+"},
            "images": self.images,
            "annotations": self.annotations,
            "categories": categories,
        }


def _distinct_group(cls: int) -> str:
    groups = attribute_groups(CLASSES[cls])
    return "state" if "state" in groups else ("colour" if "colour" in groups else groups[0])


def _attribute_expressions(rng, cls: int, value: str) -> list[str]:
    name = CLASSES[cls].name
    who = "who is" if CLASSES[cls].is_person else "that is"
    options = [
        f"{value} {name}",
        f"the {value} {name}",
        f"the {value} one",
        f"{name} {who} {value}",
    ]
    picks = rng.choice(len(options), size=2, replace=False)
    return [options[int(i)] for i in picks]


def _refcoco_image(rng: np.random.Generator, classes: ClassSet, people: bool):
    """A spec with 2-3 same-class instances and (instance index, expressions) refs."""
    spec = SceneSpec()
    cls = _pick(rng, classes.persons if people else classes.non_person)
    spec.exact.add(cls)
    name = CLASSES[cls].name
    if rng.random() < 0.3:  # told apart by a relation
        if people:
            held = _pick(rng, classes.handheld)
            a, _, x = spec.add(cls), spec.add(cls), spec.add(held)
            spec.relations.append((a, "holding", x))
            hname = CLASSES[held].name
            exprs = [f"{name} holding {article(hname)} {hname}", f"{name} with the {hname}"]
        else:
            anchor = _pick(rng, classes.foreground_except(cls))
            a, _, x = spec.add(cls), spec.add(cls), spec.add(anchor)
            spec.relations.append((a, "next to", x))
            aname = CLASSES[anchor].name
            exprs = [f"{name} next to the {aname}", f"the {name} beside the {aname}"]
        spec.exact.add(spec.objects[x].cls)
        return spec, [(a, exprs)]
    group = _distinct_group(cls)
    k = int(rng.integers(2, 4))
    values = [str(v) for v in rng.choice(ATTRIBUTE_GROUPS[group], size=k, replace=False)]
    refs = []
    for value in values:
        i = spec.add(cls, **{group: value})
        refs.append((i, _attribute_expressions(rng, cls, value)))
    return spec, refs


def build_refcoco(
    rng: np.random.Generator,
    classes: ClassSet,
    images: dict[str, int],
    make_scene: SceneMaker,
    coco_ids: IdAllocator,
) -> tuple[list[Scene], ReferWorld]:
    """RefCOCO+ refs (train/val/testA/testB) about ``classes`` over COCO-like images.

    testA holds expressions about people, testB about other objects, train and val both.
    Expressions use attributes and relations but no location words, as in RefCOCO+.
    """
    scenes, world = [], ReferWorld()
    ann_id = sent_id = 0
    for split in REFCOCO_SPLITS:
        for _ in range(images[split]):
            people = {"testA": True, "testB": False}.get(split, bool(rng.random() < 0.5))
            spec, refs = _refcoco_image(rng, classes, people)
            image_id = coco_ids()
            name = f"{COCO_PREFIX['train']}_{image_id:012d}"
            scene = make_scene(name, spec)
            scenes.append(scene)
            world.images.append(
                {
                    "id": image_id,
                    "file_name": f"{name}.jpg",
                    "width": scene.width,
                    "height": scene.height,
                }
            )
            ann_of = {}
            for i in scene.foreground():
                ann_id += 1
                ann_of[i] = ann_id
                x1, y1, x2, y2 = scene.objects[i].box
                w, h = round(x2 - x1, 2), round(y2 - y1, 2)
                world.annotations.append(
                    {
                        "id": ann_id,
                        "image_id": image_id,
                        "category_id": scene.objects[i].cls + 1,
                        "bbox": [x1, y1, w, h],
                        "area": round(w * h, 2),
                        "iscrowd": 0,
                        "segmentation": [[x1, y1, x2, y1, x2, y2, x1, y2]],
                    }
                )
            for index, expressions in refs:
                sentences = []
                for raw in expressions:
                    sent_id += 1
                    tokens = tokenize(raw)
                    sentences.append(
                        {"tokens": tokens, "raw": raw, "sent_id": sent_id, "sent": " ".join(tokens)}
                    )
                world.refs.append(
                    {
                        "ref_id": len(world.refs),
                        "ann_id": ann_of[index],
                        "image_id": image_id,
                        "split": split,
                        "category_id": scene.objects[index].cls + 1,
                        "file_name": f"{name}_{ann_of[index]}.jpg",
                        "sent_ids": [s["sent_id"] for s in sentences],
                        "sentences": sentences,
                    }
                )
    return scenes, world
