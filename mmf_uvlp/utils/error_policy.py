"""Bad input, raised or counted: the one policy every reader of the package follows.

``ErrorPolicy`` is how a reader reports a bad item (a :class:`~mmf_uvlp.errors.FormatError`
naming file, line, field, what was expected and what was found): with ``on_error="raise"``
(the default) the first bad item stops the build; with ``"skip"`` the item is dropped and
counted by reason (a few examples of each reason are kept for the report). Nothing is
dropped without being counted. A build that has nothing left to work on (no image, no
sentence) stops with :class:`~mmf_uvlp.errors.EmptyInputError`, naming the input files.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List

from mmf_uvlp.errors import FormatError


def make_error(path, line, field, expected, got=None) -> FormatError:
    """A ``FormatError`` naming file, 1-based line, field, what was expected and what came."""
    return FormatError(str(path), field, expected, got, line=line)


def error_reason(source: str, err: "FormatError") -> str:
    """The counter key of a skipped item: ``<source>: <field>``."""
    import re

    field = re.sub(r"\[\d+\]", "[]", str(getattr(err, "field", "row")))
    return f"{source}: {field}"


class ErrorPolicy:
    """Raise on the first bad item, or skip it and count it by reason."""

    def __init__(self, on_error: str = "raise", max_examples: int = 5) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.max_examples = max_examples
        self.counts: Counter = Counter()
        self.examples: Dict[str, List[str]] = {}

    def handle(self, source: str, err: Exception) -> None:
        """Raise ``err`` (mode "raise") or count it under ``source: field``."""
        if self.on_error == "raise":
            raise err
        reason = error_reason(source, err)
        self.counts[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < self.max_examples:
            examples.append(str(err))

    def merge(self, other: "ErrorPolicy") -> None:
        self.counts.update(other.counts)
        for reason, examples in other.examples.items():
            mine = self.examples.setdefault(reason, [])
            mine.extend(examples[: max(0, self.max_examples - len(mine))])

    def to_dict(self) -> Dict[str, object]:
        return {
            "counts": dict(sorted(self.counts.items())),
            "examples": {k: v for k, v in sorted(self.examples.items())},
        }

    @classmethod
    def from_dict(cls, data: Dict[str, object], on_error: str = "skip") -> "ErrorPolicy":
        policy = cls(on_error)
        policy.counts.update(data.get("counts", {}))
        for reason, examples in data.get("examples", {}).items():
            policy.examples[reason] = list(examples)
        return policy
