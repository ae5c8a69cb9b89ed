"""RefCOCO+ in the layout of the ``refer`` toolkit.

``<root>/refcoco+/refs(unc).p``: a pickled list of refs ``{ref_id, ann_id, image_id,
split, category_id, file_name, sent_ids, sentences: [{sent, tokens, raw, sent_id}]}``,
read with a restricted unpickler (plain containers, numbers and strings: a pickle naming
any other global is refused, as loading it could run code);
``<root>/refcoco+/instances.json``: COCO-style ``images``, ``annotations`` (``bbox`` =
[x, y, w, h] pixels) and ``categories``.

Both files are single objects (a pickle and a json), so they are loaded whole; the
expressions are then yielded one at a time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.safe_loading import restricted_load

REFER_SPLITS = ("train", "val", "testA", "testB")
REF_FIELDS = ("ref_id", "ann_id", "image_id", "split", "category_id", "sentences")
SENTENCE_FIELDS = ("sent", "tokens", "raw", "sent_id")


@dataclass(frozen=True)
class ReferringExpression:
    """One sentence of a ref with its gold box [x1, y1, x2, y2] and image."""

    ref_id: int
    sent_id: int
    split: str
    sentence: str
    tokens: tuple[str, ...]
    image_id: int
    image_file: str
    image_width: int
    image_height: int
    ann_id: int
    category_id: int
    box: tuple[float, float, float, float]


class Refer:
    """Refs and instances of one refer data set (e.g. ``refcoco+``, split by ``unc``)."""

    def __init__(self, root: str | os.PathLike, dataset: str = "refcoco+", split_by: str = "unc"):
        folder = Path(root) / dataset
        self.refs_path = folder / f"refs({split_by}).p"
        self.instances_path = folder / "instances.json"
        for path in (self.refs_path, self.instances_path):
            if not path.exists():
                raise FileNotFoundError(f"refer file not found: {path}")
        with open(self.refs_path, "rb") as f:
            refs = restricted_load(f, self.refs_path)
        try:
            with open(self.instances_path, encoding="utf-8") as f:
                instances = json.load(f)
        except json.JSONDecodeError as e:
            raise FormatError(
                self.instances_path, "json", f"valid json ({e.msg})", line=e.lineno
            ) from None
        self.images = {img["id"]: img for img in self._list(instances, "images")}
        self.annotations = {a["id"]: a for a in self._list(instances, "annotations")}
        self.categories = {c["id"]: c for c in self._list(instances, "categories")}
        if not isinstance(refs, list):
            raise FormatError(self.refs_path, "refs", "a list of refs", type(refs).__name__)
        self.refs = refs
        for ann in self.annotations.values():
            self._check_annotation(ann)

    def _list(self, instances, field: str) -> list[dict]:
        value = instances.get(field) if isinstance(instances, dict) else None
        if not isinstance(value, list) or not all(isinstance(v, dict) and "id" in v for v in value):
            raise FormatError(
                self.instances_path, field, "a list of objects with an 'id'", type(value).__name__
            )
        return value

    def _check_annotation(self, ann: dict) -> None:
        image = self.images.get(ann.get("image_id"))
        if image is None:
            raise FormatError(
                self.instances_path,
                "annotations.image_id",
                "the id of an image in 'images'",
                ann.get("image_id"),
                key=str(ann["id"]),
            )
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise FormatError(
                self.instances_path, "annotations.bbox", "[x, y, w, h]", bbox, key=str(ann["id"])
            )
        x, y, w, h = bbox
        if (
            w < 0
            or h < 0
            or x < -1
            or y < -1
            or x + w > image["width"] + 1
            or y + h > image["height"] + 1
        ):
            raise FormatError(
                self.instances_path,
                "annotations.bbox",
                f"a box inside the {image['width']}x{image['height']} image",
                bbox,
                key=str(ann["id"]),
            )
        if ann.get("category_id") not in self.categories:
            raise FormatError(
                self.instances_path,
                "annotations.category_id",
                "the id of a category",
                ann.get("category_id"),
                key=str(ann["id"]),
            )

    def _check_ref(self, index: int, ref) -> None:
        key = f"refs[{index}]"
        if not isinstance(ref, dict):
            raise FormatError(self.refs_path, "ref", "a dict", type(ref).__name__, key=key)
        missing = [f for f in REF_FIELDS if f not in ref]
        if missing:
            raise FormatError(
                self.refs_path, missing[0], f"fields {list(REF_FIELDS)}", sorted(ref), key=key
            )
        if ref["split"] not in REFER_SPLITS:
            raise FormatError(
                self.refs_path, "split", f"one of {list(REFER_SPLITS)}", ref["split"], key=key
            )
        if ref["ann_id"] not in self.annotations:
            raise FormatError(
                self.refs_path,
                "ann_id",
                f"an annotation id of {self.instances_path.name}",
                ref["ann_id"],
                key=key,
            )
        if self.annotations[ref["ann_id"]]["image_id"] != ref["image_id"]:
            raise FormatError(
                self.refs_path, "image_id", "the image of its annotation", ref["image_id"], key=key
            )
        for s in ref["sentences"]:
            if not isinstance(s, dict) or any(f not in s for f in SENTENCE_FIELDS):
                raise FormatError(
                    self.refs_path, "sentences", f"dicts with {SENTENCE_FIELDS}", s, key=key
                )

    def expressions(self, split: str | None = None) -> Iterator[ReferringExpression]:
        """Every sentence of every ref (of ``split`` when given), checked on the way."""
        if split is not None and split not in REFER_SPLITS:
            raise ValueError(f"split must be one of {REFER_SPLITS}, got {split!r}")
        for index, ref in enumerate(self.refs):
            self._check_ref(index, ref)
            if split is not None and ref["split"] != split:
                continue
            ann = self.annotations[ref["ann_id"]]
            image = self.images[ref["image_id"]]
            x, y, w, h = ann["bbox"]
            for s in ref["sentences"]:
                yield ReferringExpression(
                    ref_id=ref["ref_id"],
                    sent_id=s["sent_id"],
                    split=ref["split"],
                    sentence=s["sent"],
                    tokens=tuple(s["tokens"]),
                    image_id=ref["image_id"],
                    image_file=image["file_name"],
                    image_width=image["width"],
                    image_height=image["height"],
                    ann_id=ref["ann_id"],
                    category_id=ref["category_id"],
                    box=(x, y, x + w, y + h),
                )
