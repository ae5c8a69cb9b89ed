"""Detector label maps: class names and their ids, id 0 being the background.

Two layouts, told apart by the file name as scene_graph_benchmark tells them apart
(``load_labelmap_file``: a name ending in ``json`` is json):

- json, VinVL's ``VG-SGG-dicts-vgoi6-clipped.json``: ``label_to_idx`` (name -> id, ids from
  1) and/or ``idx_to_label`` (id, as a string -> name). When both are there they must agree.
  Other keys (``attribute_to_idx``, ``predicate_to_idx``, ...) are ignored.
- tsv / txt, scene_graph_benchmark's ``labelmap.tsv``: one class a line, its name in the first
  tab-separated column; the class on line ``i`` has id ``i``.

A detector row names its class either way: by name (what scene_graph_benchmark writes) or by
id (an integer); :meth:`LabelMap.name_of` takes both. MMF's feature files store ids
(``objects``) and one probability column per id (``cls_prob``: ``num_columns`` wide).
"""

from __future__ import annotations

import json
import os
from typing import Dict, Set

from mmf_uvlp.errors import FormatError

StrPath = str | os.PathLike


class LabelMap:
    """Class ids (>= 1) and names of one detector; id 0 is the background."""

    def __init__(self, path: StrPath, names: Dict[int, str]):
        self.path = str(path)
        self.names = dict(names)
        self.ids = {name: index for index, name in names.items()}

    def __len__(self) -> int:
        return len(self.names)

    @property
    def num_columns(self) -> int:
        """Columns of a class-probability row: the largest id + 1 (the background's 0)."""
        return max(self.names, default=0) + 1

    def name_of(self, cls: object, path: StrPath, line: int, field: str) -> str:
        """The class name of a detector row's ``class`` (a name or an id) or a FormatError
        naming the row's file, line and field."""
        if isinstance(cls, int) and not isinstance(cls, bool):
            if cls not in self.names:
                raise FormatError(
                    path,
                    field,
                    f"a class id of {self.path} (1..{self.num_columns - 1})",
                    cls,
                    line=line,
                )
            return self.names[cls]
        if not isinstance(cls, str) or cls.strip() not in self.ids:
            raise FormatError(
                path,
                field,
                f"a class name or id of {self.path} ({len(self)} classes)",
                cls,
                line=line,
            )
        return cls.strip()

    def id_of(self, name: str, path: StrPath, line: int, field: str) -> int:
        """The id of a class name, or a FormatError naming the row."""
        if name not in self.ids:
            raise FormatError(
                path, field, f"a class name of {self.path} ({len(self)} classes)", name, line=line
            )
        return self.ids[name]


def load_labelmap(path: StrPath) -> LabelMap:
    """Read a json or tsv label map (see the module docstring)."""
    path = str(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"label map not found: {path}")
    return _load_json(path) if path.endswith("json") else _load_lines(path)


def _class_id(path: str, value: object, key: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(path, "id", "an integer id >= 1 (0 is the background)", value, key=key)
    return value


def _class_name(path: str, value: object, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FormatError(path, "name", "a non-empty class name", value, key=key)
    return value.strip()


def _load_json(path: str) -> LabelMap:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as e:
        raise FormatError(path, "json", f"valid json ({e.msg})", line=e.lineno) from None
    except UnicodeDecodeError as e:
        raise FormatError(path, "encoding", "UTF-8", str(e)) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("label_to_idx", {}), dict)
        or not isinstance(data.get("idx_to_label", {}), dict)
        or not ("label_to_idx" in data or "idx_to_label" in data)
    ):
        raise FormatError(
            path,
            "label_to_idx",
            "a json object with a 'label_to_idx' (name -> "
            "id) or 'idx_to_label' (id -> name) object",
            sorted(data) if isinstance(data, dict) else type(data).__name__,
        )
    names: Dict[int, str] = {}
    for name, value in data.get("label_to_idx", {}).items():
        key = f"label_to_idx.{name}"
        index = _class_id(path, value, key)
        if index in names:
            raise FormatError(
                path, "id", f"an id of one class ({names[index]!r} has it already)", index, key=key
            )
        names[index] = _class_name(path, name, key)
    by_id = data.get("idx_to_label", {})
    for raw_index, name in by_id.items():
        key = f"idx_to_label.{raw_index}"
        index, name = _class_id(path, raw_index, key), _class_name(path, name, key)
        if "label_to_idx" in data and names.get(index) != name:
            raise FormatError(
                path,
                "idx_to_label",
                f"the class of id {index} in label_to_idx ({names.get(index)!r})",
                name,
                key=key,
            )
        names[index] = name
    if "label_to_idx" in data and by_id and len(by_id) != len(names):
        raise FormatError(
            path, "idx_to_label", f"the {len(names)} ids of label_to_idx", f"{len(by_id)} ids"
        )
    _check_unique_names(path, names)
    return LabelMap(path, names)


def _check_unique_names(path: str, names: Dict[int, str]) -> None:
    seen: Dict[str, int] = {}
    for index, name in sorted(names.items()):
        if name in seen:
            raise FormatError(
                path,
                "name",
                f"a name of one class (id {seen[name]} has it already)",
                name,
                key=str(index),
            )
        seen[name] = index
    if not names:
        raise FormatError(path, "classes", "at least one class", "none")


def _load_lines(path: str) -> LabelMap:
    names: Dict[int, str] = {}
    lines: Dict[str, int] = {}
    with open(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise FormatError(path, "encoding", "UTF-8", str(e), line=line) from None
            name = text.split("\t", 1)[0].strip()
            if not name:
                raise FormatError(path, "name", "a class name (one class a line)", text, line=line)
            if name in lines:
                raise FormatError(
                    path,
                    "name",
                    f"a name not used before (line {lines[name]} has it already)",
                    name,
                    line=line,
                )
            lines[name] = line
            names[line] = name
    if not names:
        raise FormatError(path, "classes", "at least one class", "an empty file")
    return LabelMap(path, names)


NAMED_LABELMAP = "labelmap.tsv"


def labelmap_of_names(predictions: StrPath) -> LabelMap:
    """The label map of a ``predictions.tsv`` whose every object names its class: ids 1..N
    in the names' sorted order. A class given by id needs the detector's own label map: a
    FormatError names its file, line and field."""
    path = str(predictions)
    names: Set[str] = set()
    with open(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            _, tab, text = raw.partition(b"\t")
            try:
                record = json.loads(text) if tab else None
            except (ValueError, UnicodeDecodeError):
                continue  # the conversion names the bad row
            objects = record.get("objects") if isinstance(record, dict) else None
            for k, obj in enumerate(objects if isinstance(objects, list) else []):
                cls = obj.get("class") if isinstance(obj, dict) else None
                if isinstance(cls, int) and not isinstance(cls, bool):
                    raise FormatError(
                        path,
                        f"objects[{k}].class",
                        "a class name (a class id needs the detector's label map: give --labelmap)",
                        cls,
                        line=line,
                    )
                if isinstance(cls, str) and cls.strip():
                    names.add(cls.strip())
    if not names:
        raise FormatError(path, "objects[].class", "at least one class name", "none")
    return LabelMap(
        f"{path} (its class names)",
        {index: name for index, name in enumerate(sorted(names), start=1)},
    )


def write_labelmap(labelmap: LabelMap, path: StrPath) -> None:
    """``labelmap`` as a tsv label map (one class a line, the line number its id), which
    :func:`load_labelmap` reads back with the same ids."""
    if sorted(labelmap.names) != list(range(1, len(labelmap) + 1)):
        raise ValueError(f"{labelmap.path}: ids are not 1..{len(labelmap)}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{labelmap.names[index]}\n" for index in sorted(labelmap.names))
