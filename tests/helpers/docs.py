"""Reading the command blocks of the README and the docs: ``bash`` / ``sh`` / ``console``
fences, their logical lines (continuations joined, comments dropped)."""

from __future__ import annotations

import re
from pathlib import Path

FENCE = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```$", re.S | re.M)


def without_comment(line: str) -> str:
    """``line`` up to a ``#`` that starts a shell comment (after a blank, outside quotes)."""
    quote = None
    for at, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at]
    return line


def logical_lines(block: str) -> list[tuple[int, str]]:
    """(offset of its first line, text) of each command of ``block``: continuation lines
    joined, lines joined while a ``$(`` is open, comments and blank lines dropped."""
    lines, current, start = [], "", 0
    for offset, raw in enumerate(block.splitlines()):
        if not current.strip():
            start = offset
        text = without_comment(raw).rstrip()
        if text.endswith("\\"):
            current += text[:-1] + " "
            continue
        current += text
        if current.count("$(") > current.count(")"):
            current += " "
            continue
        if current.strip():
            lines.append((start, " ".join(current.split())))
        current = ""
    return lines


def section_commands(page: Path, heading: str) -> list[str]:
    """The commands of the first command block under the ``## heading`` of ``page``."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    match = FENCE.search(text, start)
    assert match is not None, f"{page}: no command block under '## {heading}'"
    return [line for _, line in logical_lines(match.group(1))]
