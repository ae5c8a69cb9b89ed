"""What the toy-world tests share: the generator's files, ground truth and tool."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from mmf_uvlp.toy_world.vocabulary import CLASSES, plural


def files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def ground_truth(out: Path, pool: str) -> dict[str, dict]:
    return {r["image_id"]: r for r in map(json.loads, open(out / "images_gt" / f"{pool}.jsonl"))}


# words that name an object class but also occur otherwise: a colour, narrative fillers
NOT_OBJECTS = ("orange", "went back to bed", "put on a coat")
CLASS_WORDS = {w: c.name for c in CLASSES for w in (c.name, plural(c.name))}
CLASS_PATTERN = re.compile(
    r"\b(" + "|".join(re.escape(w) for w in sorted(CLASS_WORDS, key=len, reverse=True)) + r")\b"
)


def classes_named(texts) -> Counter:
    """Class names mentioned in ``texts`` (longest name first: "hot dog" is no "dog")."""
    found = Counter()
    for text in texts:
        text = text.lower()
        for words in NOT_OBJECTS:
            text = re.sub(rf"\b{words}\b", " ", text)
        found.update(CLASS_WORDS[w] for w in CLASS_PATTERN.findall(text))
    return found
