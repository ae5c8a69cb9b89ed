"""Sizes and switches of a generated world, and the named presets.

- ``tiny``: ~200 images, feature_dim 64, every format; generates in about a second (tests).
- ``demo``: 3,000 pre-training images and a few thousand examples per downstream task,
  feature_dim 128 (2048-d features with ~12 regions would be ~100 KB an image and make
  the 2-core demo chain of pre-training plus four fine-tunings far too slow); MMF LMDBs
  and npy folders for every pool, VinVL ``features.tsv`` for the pre-training pool only.
- ``calibrated``: 24 foreground classes, 30,000 pre-training images captioned by object
  lists (``caption_style="objects"``), the demo world's RefCOCO+ sizes, four times its VQA
  and VE training sets (12,000 each, so that 1,500 fine-tuning updates do not memorize
  them), 6,000 NLVR2 training pairs with presence statements, half of them about 4 classes
  and the others about any of the 24 (with the demo's 1,000 mixed ones every system stays
  at chance; over all 24 Base stays at chance, over 6 it solves them, above the pre-trained
  systems; the graded mix leaves it between the two) and no npy folders (~1 GB); the world
  in which caption pre-training binds words to regions (docs/replication.md,
  "Calibration"), run with ``configs/study/calibrated.yaml``.
- ``bench``: 100,000 pre-training images and 1,000,000 sentences for corpus-build
  throughput; detections and text only (no features, no downstream sets).

``foreground_classes`` (0 in every preset: all of them) restricts a world to fewer
foreground classes, so that the same number of examples shows each class more often;
which classes is a fixed function of the number (:meth:`ClassSet.of_size`).

``caption_style`` sets the pre-training pool's captions (``captions_gt.tsv`` and the caption
corpus; the downstream texts keep theirs): ``web`` (every preset) describes salient objects
with attributes, counts, relations and web noise, so a caption's words partly predict its
class words; ``objects`` lists 1-3 of the image's foreground classes ("a dog, a hat and an
elephant"), so only the image says which (docs/replication.md, "Calibration");
``attributes`` lists 1-3 foreground objects with their attributes ("a small red cup and a
wooden table"), so the words that say how an object looks are bound to regions too.

``nlvr2_statements`` sets NLVR2's statement kinds: ``mixed`` (all but ``calibrated``) draws exact
counts on one side, totals, a colour in both images, an object in one image only and who
holds what; ``presence`` draws statements about which images show an object only (in the
left/right image, in both, in one and not the other). ``nlvr2_classes`` (0: every active
foreground class) makes the statements name only that many classes, the first of the
world's in round-robin order (:meth:`ClassSet.first`); the scenes still draw their other
objects from every active class. ``nlvr2_classes_percent`` (100: every pair) holds only that
percent of the pairs, drawn per pair, to those classes; the others name any active class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from mmf_uvlp.toy_world.downstream import NLVR2_STATEMENTS
from mmf_uvlp.toy_world.text import CAPTION_STYLES
from mmf_uvlp.toy_world.vocabulary import (
    FOREGROUND,
    MIN_FOREGROUND_CLASSES,
    NEEDS_TEXT,
    ClassSet,
)


# the settings that name one of a few choices (every other one but ``preset`` is a count)
_CHOICES = {"caption_style": CAPTION_STYLES, "nlvr2_statements": NLVR2_STATEMENTS}


@dataclass(frozen=True)
class WorldConfig:
    """Everything that determines a world's bytes (together with the code)."""

    preset: str
    seed: int = 0
    feature_dim: int = 64
    num_images: int = 48  # pre-training pool
    extra_captions: int = 24  # captions of images outside the pool (caption corpus only)
    narrative_sentences: int = 120
    max_regions: int = 24
    features: bool = True  # region features: LMDB per pool, VinVL features.tsv for cc
    vinvl_features_all_pools: bool = True  # features.tsv for the downstream pools too
    npy: bool = True  # MMF npy feature folders as well
    downstream: bool = True
    vqa2_questions: tuple[int, int, int] = (36, 12, 12)  # train, val, test
    nlvr2_pairs: tuple[int, int, int] = (16, 8, 8)
    ve_hypotheses: tuple[int, int, int] = (36, 12, 12)
    refcoco_images: tuple[int, int, int, int] = (12, 4, 4, 4)  # train, val, testA, testB
    foreground_classes: int = 0  # active foreground classes, 0 = every one
    caption_style: str = "web"  # pre-training captions: web | objects | attributes
    nlvr2_statements: str = "mixed"  # NLVR2 statement kinds: mixed | presence
    nlvr2_classes: int = 0  # foreground classes NLVR2 statements name, 0 = every active one
    nlvr2_classes_percent: int = 100  # percent of NLVR2 pairs held to those classes

    def __post_init__(self):
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"WorldConfig.{name} must be one of {sorted(choices)}, "
                    f"got {getattr(self, name)!r}"
                )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "preset" or f.name in _CHOICES or isinstance(value, bool):
                continue
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
                raise ValueError(
                    f"WorldConfig.{f.name} must be non-negative integers, got {value!r}"
                )
        for name in ("feature_dim", "max_regions"):
            if getattr(self, name) < 1:
                raise ValueError(f"WorldConfig.{name} must be >= 1, got {getattr(self, name)}")
        k = self.foreground_classes
        if k and not MIN_FOREGROUND_CLASSES <= k <= len(FOREGROUND):
            raise ValueError(
                f"WorldConfig.foreground_classes must be 0 (every foreground class) or from "
                f"{MIN_FOREGROUND_CLASSES} to {len(FOREGROUND)}, got {k}: {NEEDS_TEXT}, "
                f"which takes at least {MIN_FOREGROUND_CLASSES} classes"
            )

        named = len(self.class_set().foreground)
        if self.nlvr2_classes > named:
            raise ValueError(
                f"WorldConfig.nlvr2_classes must be 0 (every active foreground "
                f"class) or at most the {named} active foreground classes, got "
                f"{self.nlvr2_classes}"
            )
        if self.nlvr2_classes_percent > 100:
            raise ValueError(
                f"WorldConfig.nlvr2_classes_percent must be at most 100, got "
                f"{self.nlvr2_classes_percent}"
            )
        if self.nlvr2_classes_percent < 100 and not self.nlvr2_classes:
            raise ValueError(
                f"WorldConfig.nlvr2_classes_percent {self.nlvr2_classes_percent} "
                f"needs nlvr2_classes (the classes those pairs name), got 0"
            )

    def class_set(self) -> ClassSet:
        """The classes the world draws from."""
        return ClassSet.of_size(self.foreground_classes)

    def scaled_downstream(self, factor: float) -> "WorldConfig":
        """The same world with every downstream split size multiplied by ``factor``."""

        def scale(sizes):
            return tuple(max(1, round(s * factor)) for s in sizes)

        return replace(
            self,
            vqa2_questions=scale(self.vqa2_questions),
            nlvr2_pairs=scale(self.nlvr2_pairs),
            ve_hypotheses=scale(self.ve_hypotheses),
            refcoco_images=scale(self.refcoco_images),
        )

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


PRESETS: dict[str, WorldConfig] = {
    "tiny": WorldConfig(preset="tiny"),
    "demo": WorldConfig(
        preset="demo",
        feature_dim=128,
        num_images=3000,
        extra_captions=1500,
        narrative_sentences=6000,
        vinvl_features_all_pools=False,
        vqa2_questions=(3000, 600, 600),
        nlvr2_pairs=(1000, 250, 250),
        ve_hypotheses=(3000, 600, 600),
        refcoco_images=(800, 150, 150, 150),
    ),
    "calibrated": WorldConfig(
        preset="calibrated",
        feature_dim=128,
        num_images=30_000,
        extra_captions=1500,
        narrative_sentences=6000,
        vinvl_features_all_pools=False,
        npy=False,
        vqa2_questions=(12_000, 600, 600),
        nlvr2_pairs=(6000, 500, 1000),
        ve_hypotheses=(12_000, 600, 600),
        refcoco_images=(800, 150, 150, 150),
        foreground_classes=24,
        caption_style="objects",
        nlvr2_statements="presence",
        nlvr2_classes=4,
        nlvr2_classes_percent=50,
    ),
    "bench": WorldConfig(
        preset="bench",
        num_images=100_000,
        extra_captions=100_000,
        narrative_sentences=800_000,
        features=False,
        npy=False,
        downstream=False,
    ),
}
