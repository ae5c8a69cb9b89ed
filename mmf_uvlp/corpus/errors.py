"""Bad input: one error type that names where it is, and a policy that raises or counts.

``FormatError`` follows the contract of ``mmf_uvlp.data_formats.vinvl.FormatError`` (a
``ValueError`` naming file, line, field and what was expected). When that module exists its
class is re-exported here, so ``except FormatError`` catches errors raised by either reader.

``ErrorPolicy`` is how every reader of this package reports a bad item: with
``on_error="raise"`` (the default) the first bad item stops the build; with ``"skip"`` the item
is dropped and counted by reason (a few examples of each reason are kept for the report).
Nothing is dropped without being counted.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional

try:  # the shared, streaming VinVL readers (a colleague's module), when present
    from mmf_uvlp.data_formats.vinvl import FormatError as _SharedFormatError
except Exception:  # pragma: no cover - depends on the checkout
    _SharedFormatError = None


if _SharedFormatError is not None:  # pragma: no cover - depends on the checkout
    FormatError = _SharedFormatError
else:

    class FormatError(ValueError):
        """A bad item of an input file: ``path:line: field: expected ..., got ...``."""

        def __init__(
            self,
            path: str,
            line: Optional[int],
            field: str,
            expected: str,
            got: Optional[str] = None,
        ) -> None:
            self.path = str(path)
            self.line = line
            self.field = field
            self.expected = expected
            self.got = got
            where = f"{self.path}:{line}" if line is not None else self.path
            message = f"{where}: field {field!r}: expected {expected}"
            if got is not None:
                message += f", got {got}"
            super().__init__(message)


def make_error(path, line, field, expected, got=None) -> "FormatError":
    """Build a ``FormatError`` whichever class is in use (keyword-compatible)."""
    if got is not None and len(got) > 80:
        got = got[:77] + "..."
    try:
        return FormatError(path=str(path), line=line, field=field, expected=expected, got=got)
    except TypeError:  # pragma: no cover - a shared class with another signature
        return FormatError(f"{path}:{line}: field {field!r}: expected {expected}, got {got}")


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
