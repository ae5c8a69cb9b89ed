"""Tools delete and overwrite only what they made, inside their own output folder.

``make_toy_world.py --overwrite`` removes the files its ``world_files.txt`` lists: an entry
outside the world (``../``, absolute) or a symbolic link on the way is refused, naming the
list, the line and the entry, and nothing outside the world is touched. ``build_corpus.py
run --restart`` with ``annotations/`` a link to a user's folder is refused before it deletes
or writes anything there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmf_uvlp.corpus.pipeline import build

from helpers import REPO
from helpers.corpus import shared_resources, tiny_config, write_tiny_world

SMALL = ("--preset", "tiny", "--no-progress", "--no-downstream", "--no-features")


def _make_world(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "make_toy_world.py"),
            *SMALL,
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


@pytest.fixture
def world(tmp_path) -> Path:
    out = tmp_path / "world"
    result = _make_world(out)
    assert result.returncode == 0, result.stderr
    return out


def _list_also(world: Path, entry: str) -> int:
    """Add ``entry`` to the world's file list; returns its line number."""
    listing = world / "world_files.txt"
    lines = listing.read_text().splitlines() + [entry]
    listing.write_text("\n".join(lines) + "\n")
    return len(lines)


@pytest.mark.parametrize("kind", ["parent", "absolute"])
def test_overwrite_refuses_a_list_entry_outside_the_world(world, tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file")
    entry = "../victim.txt" if kind == "parent" else str(victim)
    line = _list_also(world, entry)
    result = _make_world(world, "--overwrite", "--seed", "1")
    assert result.returncode == 2
    message = result.stderr.strip().splitlines()[-1]
    assert f"{world / 'world_files.txt'}:{line}: entry {entry!r}" in message, result.stderr
    assert "Traceback" not in result.stderr
    assert victim.read_text() == "a user's file"
    assert '"seed": 0' in (world / "world.json").read_text()  # the old world is untouched


def test_overwrite_does_not_write_through_a_linked_subfolder(world, tmp_path):
    """``text/`` replaced by a link to a user's folder: the overwrite stops before it writes
    anything, and the user's folder keeps its files."""
    mine = tmp_path / "my_text"
    (world / "text").rename(mine)
    (mine / "captions_gt.tsv").write_text("my captions\n")
    (world / "text").symlink_to(mine, target_is_directory=True)
    result = _make_world(world, "--overwrite", "--seed", "1")
    assert result.returncode == 2
    assert f"{world / 'text'} is a symbolic link (to {mine})" in result.stderr
    assert (mine / "captions_gt.tsv").read_text() == "my captions\n"
    assert sorted(p.name for p in mine.iterdir()) == [
        "caption_corpus.txt",
        "captions_gt.tsv",
        "narrative_corpus.txt",
    ]


def test_overwrite_checks_the_new_worlds_folders_too(tmp_path):
    """A world listing no ``text/`` file yet (an older list) with ``text/`` linked: the new
    world's files are not moved through the link."""
    out = tmp_path / "world"
    assert _make_world(out).returncode == 0
    listing = out / "world_files.txt"
    listing.write_text(
        "".join(
            line + "\n" for line in listing.read_text().splitlines() if not line.startswith("text/")
        )
    )
    mine = tmp_path / "elsewhere"
    mine.mkdir()
    for path in (out / "text").iterdir():
        path.unlink()
    (out / "text").rmdir()
    (out / "text").symlink_to(mine, target_is_directory=True)
    result = _make_world(out, "--overwrite", "--seed", "1")
    assert result.returncode == 2, result.stderr
    assert (
        f"new world file 'text/caption_corpus.txt': {out / 'text'} is a symbolic link"
        in result.stderr
    )
    assert list(mine.iterdir()) == []


def test_an_overwrite_of_a_sound_world_still_replaces_it(world):
    (world / "notes.txt").write_text("mine")
    result = _make_world(world, "--overwrite", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert '"seed": 1' in (world / "world.json").read_text()
    assert (world / "notes.txt").read_text() == "mine"


def test_a_build_refuses_annotations_linked_to_a_users_folder(tmp_path):
    """``--restart`` with ``annotations/`` a link: the user's ``*.tmp.*`` file stays, no
    ``index.json`` is written there, and the error names the link."""
    inputs = write_tiny_world(tmp_path / "inputs")
    config = tiny_config(inputs, gt=False)
    out = tmp_path / "corpus"
    build(config, str(out), resources=shared_resources())
    mine = tmp_path / "my_folder"
    mine.mkdir()
    (mine / "draft.tmp.1").write_text("a user's draft")
    os.rename(out / "annotations", tmp_path / "old_annotations")
    (out / "annotations").symlink_to(mine, target_is_directory=True)
    with pytest.raises(
        ValueError,
        match=rf"{out / 'annotations'} is a symbolic link "
        rf"\(to {mine}\)",
    ):
        build(config, str(out), resources=shared_resources(), restart=True)
    assert sorted(p.name for p in mine.iterdir()) == ["draft.tmp.1"]
    assert (out / "state.json").exists()  # nothing was discarded either


def test_the_corpus_cli_names_a_linked_folder_in_one_line(tmp_path):
    inputs = write_tiny_world(tmp_path / "inputs")
    out = tmp_path / "corpus"
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (out / "work").mkdir(parents=True)
    (out / "work" / "detections").symlink_to(mine / "sub", target_is_directory=True)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "build_corpus.py"),
            "run",
            "--predictions",
            inputs["predictions"],
            "--corpus",
            inputs["corpus"],
            "--out",
            str(out),
            "--restart",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"build_corpus.py: error: build_corpus: {out / 'work' / 'detections'} is a symbolic "
        f"link (to {mine / 'sub'}); it writes and deletes in {out / 'work'} and never through "
        f"a link out of {out}: remove the link, or use another output folder"
    )
    assert list((mine / "sub").iterdir()) == []
