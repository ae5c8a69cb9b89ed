"""An ``--arch`` detectron2 yaml read as plain data, or refused in one line.

detectron2's ``CfgNode.merge_from_file`` reads yaml with ``yaml.unsafe_load`` when the safe
loader refuses a tag, so a ``!!python/object/apply:`` tag in a config runs code; its
``_BASE_`` may also name a URL, which it downloads. Here every file of the ``_BASE_`` chain
is read with ``yaml.safe_load`` first: a tag that builds a Python object, or a ``_BASE_``
URL, is refused unless the user says the file is trusted (``--trust-arch``), and only then
does detectron2 read it its own way.
"""

from __future__ import annotations

import logging
import os

import yaml
from detectron2.config import CfgNode

logger = logging.getLogger(__name__)

BASE_KEY = "_BASE_"
HINT = "pass --trust-arch if you trust this file and its origin (it may then run code)"


def check_yaml(path: str, seen: frozenset = frozenset()) -> None:
    """Refuse ``path`` (and its ``_BASE_`` chain) unless each is plain yaml data."""
    if path in seen:
        raise ValueError(f"{path}: --arch: its {BASE_KEY} chain comes back to itself")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.constructor.ConstructorError as error:
        tag = getattr(error, "problem", "") or str(error).splitlines()[0]
        line = error.problem_mark.line + 1 if error.problem_mark else "?"
        raise ValueError(
            f"{path}:{line}: --arch refused: {tag.strip()} would build a Python "
            f"object (it could run any code); {HINT}"
        ) from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: --arch: not valid yaml ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: --arch: expected a detectron2 config (a yaml mapping), "
            f"got {type(data).__name__}"
        )
    base = data.get(BASE_KEY)
    if base is None:
        return
    if not isinstance(base, str) or "://" in base:
        raise ValueError(
            f"{path}: --arch refused: {BASE_KEY} {base!r} is not a local yaml "
            f"file (a URL would be downloaded); {HINT}"
        )
    base = os.path.expanduser(base)
    if not os.path.isabs(base):
        base = os.path.join(os.path.dirname(path), base)
    if not os.path.isfile(base):
        raise ValueError(f"{path}: --arch: its {BASE_KEY} {base} is no file")
    check_yaml(base, seen | {path})


def merge_yaml(cfg: CfgNode, path: str, trusted: bool = False) -> None:
    """Merge the detectron2 yaml ``path`` into ``cfg``: checked as plain data first, unless
    ``trusted``."""
    if trusted:
        logger.warning("%s: read as a trusted config (--trust-arch: yaml may run code)", path)
    else:
        check_yaml(path)
    cfg.merge_from_file(path, allow_unsafe=trusted)
