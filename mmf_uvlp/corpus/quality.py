"""Ground truth, when given: the images' true captions and true objects.

* Captions (``inputs.captions_gt``, tsv ``image_id\\tcaption``, several rows per image allowed)
  serve two purposes: own-caption exclusion (``retrieve.exclude_own_caption``), and
  **caption recall@k** = among images that have a true caption *in the text pool* (its
  normalised text equals some corpus sentence's), the share whose top-k retrieved sentences
  contain one of its true captions (compared by normalised text). With exclusion on, the
  true caption can never be retrieved; the report says so instead of printing 0.
* Objects (``inputs.objects_gt``, jsonl ``{"image_id", "objects": [{"class", ...}]}``, same
  layout as the detections jsonl; boxes optional) give **link precision**: a linked phrase
  (similarity >= threshold) is *correct* when its region's label is one of the image's true
  object classes **and** the phrase mentions that label (every word of the label occurs among
  the phrase's words, a plural "s"/"es" stripped on both sides). Also reported: the
  **grounded rate** (linked phrases whose region label is a true class of the image, mention or
  not). Both are over linked phrases of images that have ground-truth objects.
* Without ground truth the report still gives the **mention rate**: linked phrases that mention
  their region's label.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Set

from mmf_uvlp.corpus.sentences import text_hash
from mmf_uvlp.utils.error_policy import ErrorPolicy, make_error


def load_captions(
    path: str, wanted: Optional[Set[str]], policy: ErrorPolicy
) -> Dict[str, List[int]]:
    """image_id -> normalised-text hashes of its true captions (only ``wanted`` ids)."""
    out: Dict[str, List[int]] = {}
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                policy.handle(
                    "captions_gt", make_error(path, line_no, "encoding", "UTF-8", str(exc))
                )
                continue
            parts = text.split("\t")
            if len(parts) != 2 or not parts[0] or not parts[1].strip():
                policy.handle(
                    "captions_gt",
                    make_error(
                        path,
                        line_no,
                        "row",
                        "'<image_id>\\t<caption>' (2 non-empty fields)",
                        text[:60],
                    ),
                )
                continue
            if wanted is None or parts[0] in wanted:
                out.setdefault(parts[0], []).append(text_hash(parts[1]))
    return out


def load_objects(path: str, wanted: Optional[Set[str]], policy: ErrorPolicy) -> Dict[str, Set[str]]:
    """image_id -> set of true object classes (lower-case)."""
    out: Dict[str, Set[str]] = {}
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                data = json.loads(raw.decode("utf-8"))
                image_id = str(data["image_id"])
                classes = {str(o["class"]).strip().lower() for o in data["objects"]}
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
                policy.handle(
                    "objects_gt",
                    make_error(
                        path,
                        line_no,
                        "row",
                        '{"image_id", "objects": [{"class"}]}',
                        type(exc).__name__,
                    ),
                )
                continue
            if wanted is None or image_id in wanted:
                out.setdefault(image_id, set()).update(classes)
    return out


def _singular(word: str) -> str:
    word = word.lower()
    if len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def mentions(phrase_text: str, label: str) -> bool:
    """Whether every word of ``label`` occurs in the phrase (plural-insensitive)."""
    words = {_singular(w) for w in _words(phrase_text)}
    label_words = [_singular(w) for w in _words(label)]
    return bool(label_words) and all(w in words for w in label_words)


def _words(text: str) -> List[str]:
    import re

    return re.findall(r"[a-z0-9]+", text.lower())
