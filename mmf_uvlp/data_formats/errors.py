"""The one error the format readers raise."""

from __future__ import annotations

import os


class FormatError(ValueError):
    """A malformed record: names the file, where in it, the field and what was expected."""

    def __init__(
        self, path: str | os.PathLike, field: str, expected: str, got: object = None,
        line: int | None = None, key: str | None = None,
    ):
        self.path, self.field, self.expected, self.got = str(path), field, expected, got
        self.line, self.key = line, key
        where = self.path
        if line is not None:
            where += f":{line}"
        if key is not None:
            where += f" [key {key!r}]"
        message = f"{where}: field {field!r}: expected {expected}"
        if got is not None:
            text = repr(got)
            message += f", got {text[:80] + '...' if len(text) > 80 else text}"
        super().__init__(message)
