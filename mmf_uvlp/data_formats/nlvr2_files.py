"""NLVR2 as lil-lab ships it, turned into the files MMF's ``nlvr2`` builder reads.

lil-lab's ``nlvr/nlvr2/data/{train,dev,test1}.json`` hold one json object a line
(``identifier`` ``<split>-<set>-<pair>-<sentence>``, ``sentence``, ``label`` "True"/"False",
and more keys: ``left_url``, ``writer``, ``validation``, ...). MMF's ``AnnotationDatabase``
picks its parser by the file name: a ``.json`` file is read as one json document, so these
files end in ``JSONDecodeError: Extra data: line 2 column 1``; under a ``.jsonl`` name MMF reads
them line by line. :func:`convert_nlvr2` checks every record (file and line named on an
error), refuses an identifier used twice, optionally checks that both images of every pair
are in the feature file MMF will read (``<split>-<set>-<pair>-img0`` and ``-img1``, the names
MMF's NLVR2 dataset looks up), and writes ``<name>.jsonl`` with the same records, one a line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional

from mmf_uvlp.data_formats.annotations import NLVR2_FIELDS, check_nlvr2, numbered_jsonl
from mmf_uvlp.data_formats.convert import layout_of
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.atomic import atomic_open

StrPath = str | os.PathLike


def image_keys(identifier: str) -> tuple[str, str]:
    """The feature keys of a pair's two images, as MMF's NLVR2 dataset forms them."""
    stem = "-".join(identifier.split("-")[:-1])
    return f"{stem}-img0", f"{stem}-img1"


def feature_lookup(features: StrPath) -> Callable[[str], bool]:
    """Whether an image key is in an MMF feature LMDB (``*.lmdb``) or ``.npy`` folder."""
    features = str(features)
    if layout_of(features) == "lmdb":
        with LmdbFeatures(features) as db:
            keys = set(db.keys())
        return keys.__contains__
    if not os.path.isdir(features):
        raise FileNotFoundError(f"feature folder not found: {features}")
    return lambda key: os.path.exists(os.path.join(features, f"{key}.npy"))


def convert_nlvr2(
    sources: List[StrPath], out: StrPath, features: Optional[StrPath] = None
) -> Dict[str, Dict[str, int]]:
    """Write ``out/<name>.jsonl`` for every ``<name>.json`` of ``sources`` (two sources of
    one name are refused before anything is written); returns per written file its
    ``records``, ``True`` and ``False`` counts."""
    out = Path(out)
    targets: Dict[Path, StrPath] = {}
    for source in sources:
        target = out / (Path(source).stem + ".jsonl")
        if target in targets:
            raise ValueError(
                f"{targets[target]} and {source} would both be written to "
                f"{target}; convert them into separate --out folders"
            )
        targets[target] = source
    has_image = feature_lookup(features) if features else None
    out.mkdir(parents=True, exist_ok=True)
    counts: Dict[str, Dict[str, int]] = {}
    for source in sources:
        target = out / (Path(source).stem + ".jsonl")
        if target.resolve() == Path(source).resolve():
            raise ValueError(f"{source}: already a .jsonl file; nothing to convert")
        with atomic_open(
            target,
            "w",
            temporary=target.with_name(target.name + ".tmp"),
            encoding="utf-8",
            newline="\n",
        ) as handle:
            tally = _copy_records(source, handle, has_image, features)
        counts[str(target)] = tally
    return counts


def _copy_records(
    source: StrPath, handle, has_image: Optional[Callable[[str], bool]], features: Optional[StrPath]
) -> Dict[str, int]:
    """Check ``source``'s records and write them to ``handle``, one a line."""
    seen: Dict[str, int] = {}
    tally = {"records": 0, "True": 0, "False": 0}
    for line, record in numbered_jsonl(source, NLVR2_FIELDS):
        check_nlvr2(source, line, record)
        identifier = record["identifier"]
        if identifier in seen:
            raise FormatError(
                source,
                "identifier",
                f"an identifier not used before ({source}:{seen[identifier]} has it already)",
                identifier,
                line=line,
            )
        seen[identifier] = line
        if has_image is not None:
            missing = [key for key in image_keys(identifier) if not has_image(key)]
            if missing:
                raise FormatError(
                    source,
                    "identifier",
                    f"a pair whose images are in {features} (missing {', '.join(missing)})",
                    identifier,
                    line=line,
                )
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        tally["records"] += 1
        tally[record["label"]] += 1
    if not tally["records"]:
        raise FormatError(source, "records", "at least one NLVR2 record", "none")
    return tally
