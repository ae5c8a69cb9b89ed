"""Files are written whole or not at all, through one helper (``mmf_uvlp/utils/atomic.py``).

No module of the package or of ``tools/`` moves a file into place itself (``os.replace``,
``os.rename``, ``shutil.move``, ``Path.rename`` / ``Path.replace``), except the renames listed
in ``RENAMES``, each with the reason it is no write.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from mmf_uvlp.utils.atomic import (
    atomic_open,
    atomic_path,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)

from helpers import REPO

HELPER = "mmf_uvlp/utils/atomic.py"
# (file, function) -> why its rename is not a write of a file
RENAMES: Dict[Tuple[str, str], str] = {
    (
        "mmf_uvlp/toy_world/generate.py",
        "_move_in",
    ): "moves a world generated whole in a staging folder into place: the folder at once, "
    "or file by file under a file list that covers both worlds",
    (
        "mmf_uvlp/replication/runner.py",
        "set_aside_previous_log",
    ): "keeps the train.log of an earlier start under another name",
    (
        "mmf_uvlp/replication/archive.py",
        "_set_aside",
    ): "renames the archived copies of a run to their earlier<k> names",
}


def _moves(tree: ast.AST) -> List[Tuple[str, int]]:
    """(enclosing function, line) of every call that moves a file."""
    found: List[Tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = (
                child.name
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                else function
            )
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                owner, attribute = child.func.value, child.func.attr
                module = owner.id if isinstance(owner, ast.Name) else None
                if (
                    module == "os"
                    and attribute in ("replace", "rename")
                    or module == "shutil"
                    and attribute == "move"
                    or module not in ("os", "shutil")
                    and attribute in ("rename", "replace")
                    and len(child.args) == 1
                    and not child.keywords
                ):  # Path.rename/replace
                    found.append((function, child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return found


def moves_in(root: Path, folders: Tuple[str, ...]) -> Dict[Tuple[str, str], List[int]]:
    """(file, function) -> the lines where it moves a file, for every ``.py`` below ``folders``."""
    sites: Dict[Tuple[str, str], List[int]] = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for function, line in _moves(ast.parse(path.read_text())):
                sites.setdefault((rel, function), []).append(line)
    return sites


def test_the_check_finds_a_hand_written_atomic_write(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "import os\nfrom pathlib import Path\n\n"
        "def save(path, text):\n    open(path + '.tmp', 'w').write(text)\n"
        "    os.replace(path + '.tmp', path)\n\n"
        "def move(path):\n    Path(path).rename(path + '.old')\n\n"
        "def words(text):\n    return text.replace('a', 'b')\n"
    )
    assert moves_in(tmp_path, ("pkg",)) == {("pkg/a.py", "save"): [6], ("pkg/a.py", "move"): [9]}


def test_no_module_moves_a_file_into_place_but_the_helper():
    sites = moves_in(REPO, ("mmf_uvlp", "tools"))
    helper = {key for key in sites if key[0] == HELPER}
    assert helper, "the helper itself moves its temporary file into place"
    unexpected = {
        f"{file}:{lines} ({function})"
        for (file, function), lines in sites.items()
        if file != HELPER and (file, function) not in RENAMES
    }
    assert not unexpected, (
        "write through mmf_uvlp.utils.atomic instead of moving a "
        f"temporary file into place: {sorted(unexpected)}"
    )
    stale: Set[Tuple[str, str]] = set(RENAMES) - set(sites)
    assert not stale, f"allowed renames that are gone: {sorted(stale)}"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_open(target, "w") as handle:
            handle.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_each_writer_publishes_the_whole_file(tmp_path):
    atomic_write_bytes(tmp_path / "a.bin", b"\x00\x01")
    atomic_write_text(tmp_path / "b.txt", "é\n")
    atomic_write_json(tmp_path / "c.json", {"b": 1, "a": [2]})
    with atomic_path(tmp_path / "d.npz", extension=".npz") as temporary:
        assert temporary == f"{tmp_path / 'd.npz'}.tmp.{os.getpid()}.npz"
        Path(temporary).write_text("x")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_bytes() == "é\n".encode()
    assert (tmp_path / "c.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'
    assert (tmp_path / "d.npz").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt", "c.json", "d.npz"]


def test_fsync_only_where_asked(tmp_path, monkeypatch):
    synced: List[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    with atomic_open(tmp_path / "work.npy", "wb") as handle:
        handle.write(b"x")
    assert synced == []
    with atomic_open(tmp_path / "state.json", "wb", fsync=True) as handle:
        handle.write(b"x")
    atomic_write_json(tmp_path / "index.json", {})
    with atomic_path(tmp_path / "f.index", fsync=True) as temporary:
        Path(temporary).write_bytes(b"x")
    assert len(synced) == 3
