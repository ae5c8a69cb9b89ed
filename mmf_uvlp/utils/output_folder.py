"""What a tool may delete or overwrite: only the files it made, inside its own output folder.

A tool that replaces its earlier output (``make_toy_world.py --overwrite``,
``build_corpus.py run --restart``) reads which files are its own from a list in that folder,
or knows the subfolders it writes. Both are checked before anything is deleted or written:

- a listed entry is a relative path that stays inside the folder (no absolute path, no
  ``..``, no empty or ``.`` part), and neither it nor a folder on its way is a symbolic
  link (a link is never followed: deleting or writing through it would reach the link's
  target, a user's file or folder outside the output);
- a subfolder the tool writes, or any folder or file below it, is no symbolic link.

A refusal is an :class:`UnsafeOutputPath` naming the list, its line and the entry, or the
link and where it points.

A tool that resumes in its output folder keeps its state in a folder of its own there
(``.convert/``, ``.extract/``); :func:`refuse_foreign_folder` refuses an output that holds
files but no such state: another tool's files or a user's, which it would replace.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Iterable

from mmf_uvlp.errors import UnsafeOutputPath


def refuse_foreign_folder(out: str, state_dir: str, tool: str) -> None:
    """``FileExistsError`` when ``out`` holds files and no ``state_dir`` of ``tool``."""
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if names and not os.path.isdir(os.path.join(out, state_dir)):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise FileExistsError(
            f"{out} exists and was not written by {tool} (no {state_dir}/ "
            f"in it; it holds {shown}): choose another output"
        )


def _link_text(path: Path) -> str:
    try:
        return f"{path} is a symbolic link (to {os.readlink(path)})"
    except OSError:
        return f"{path} is a symbolic link"


def check_no_link_on_the_way(root: Path, relative: PurePosixPath, where: str) -> Path:
    """``root / relative`` after checking that no part of it below ``root`` is a symbolic
    link; ``where`` prefixes the error (the list and line that named it, or the tool)."""
    path = root
    for part in relative.parts:
        path = path / part
        if path.is_symlink():
            raise UnsafeOutputPath(
                f"{where}: {_link_text(path)}; refusing to delete or write "
                f"through it (only files inside {root} are replaced): "
                "replace the link with the folder or file it stands for, "
                "or use another output folder"
            )
    return path


def listed_file(root: Path, entry: str, listing: Path, line: int) -> Path:
    """The file ``entry`` (line ``line`` of the list ``listing``) names inside ``root``.

    Raises :class:`UnsafeOutputPath` for an absolute path, a ``..`` / ``.`` / empty part,
    a backslash, or a symbolic link on the way.
    """
    where = f"{listing}:{line}: entry {entry!r}"
    relative = PurePosixPath(entry)
    if not entry or "\\" in entry or "\0" in entry:
        raise UnsafeOutputPath(f"{where}: expected a relative path with '/' separators")
    if relative.is_absolute():
        raise UnsafeOutputPath(
            f"{where}: expected a path relative to {root}, got an "
            "absolute path; the list names only files inside its folder"
        )
    if any(part in ("", ".", "..") for part in entry.split("/")):
        raise UnsafeOutputPath(
            f"{where}: expected a path inside {root} without '..', '.' or empty parts"
        )
    path = check_no_link_on_the_way(root, relative, where)
    if path.exists() and not path.is_file():
        raise UnsafeOutputPath(f"{where}: expected a file, {path} is a folder")
    return path


def read_file_list(root: Path, listing: Path) -> list[Path]:
    """Every file the list ``listing`` (one relative path per line) names inside ``root``,
    each checked by :func:`listed_file`; empty when there is no list."""
    if not listing.is_file():
        return []
    text = listing.read_text(encoding="utf-8")
    return [
        listed_file(root, entry, listing, number)
        for number, entry in enumerate(text.splitlines(), start=1)
    ]


def check_no_links_below(root: Path, names: Iterable[str], tool: str) -> None:
    """Refuse when a subfolder ``names`` of ``root``, or anything below one, is a symbolic
    link: ``tool`` deletes and writes in them and must not reach outside ``root``."""
    for name in names:
        top = root / name
        if top.is_symlink():
            raise UnsafeOutputPath(
                f"{tool}: {_link_text(top)}; it writes and deletes in "
                f"{top} and never through a link out of {root}: replace "
                "the link with a folder, or use another output folder"
            )
        for folder, dirs, files in os.walk(top):
            for name_below in dirs + files:
                path = Path(folder) / name_below
                if path.is_symlink():
                    raise UnsafeOutputPath(
                        f"{tool}: {_link_text(path)}; it writes and deletes in {top} and "
                        f"never through a link out of {root}: remove the link, or use "
                        "another output folder"
                    )
