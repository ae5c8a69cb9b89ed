"""A save or TensorBoard folder the run cannot write ends ``mmf_run`` in one line naming the
folder, its config key and the error, with no stack trace: a folder on a read-only file
system (``/sys``, where it is mounted read-only), one whose permissions forbid writing (as a
user other than root) and one below a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import pretrain


def _unwritable(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A folder this process cannot create or write, and the error code it gets."""
    if kind == "read_only_file_system":
        folder = Path("/sys/uvlp_unwritable_test")
        try:
            folder.mkdir()
        except PermissionError:
            return folder, "EPERM"
        except OSError as error:
            if error.errno == 30:
                return folder, "EROFS"
            raise
        folder.rmdir()
        pytest.skip("/sys is writable here")
    if kind == "permissions":
        if os.geteuid() == 0:
            pytest.skip("root writes a folder whatever its permissions")
        parent = tmp_path / "locked"
        parent.mkdir(mode=0o555)
        return parent / "save", "EACCES"
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    return blocker / "save", "ENOTDIR"


KINDS = ["read_only_file_system", "permissions", "below_a_file"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_an_unwritable_save_folder_ends_in_one_line(tiny_corpus, tmp_path, kind):
    folder, code = _unwritable(kind, tmp_path)
    output = pretrain(tmp_path, tiny_corpus.parent, folder, "training.max_updates=1", ok=False)
    last = output.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: cannot write the run's save folder {folder} (env.save_dir): {code} ("
    ), output[-3000:]
    assert last.endswith("; set env.save_dir=<a folder you can write>"), last
    assert "Traceback" not in output


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_an_unwritable_tensorboard_folder_ends_in_one_line(tiny_corpus, tmp_path, kind):
    folder, code = _unwritable(kind, tmp_path)
    output = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "save",
        "training.max_updates=1",
        "training.tensorboard=True",
        f"env.tensorboard_logdir={folder}",
        ok=False,
    )
    last = output.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: cannot write the TensorBoard folder {folder} "
        f"(env.tensorboard_logdir): {code} ("
    ), output[-3000:]
    assert last.endswith(
        "; set env.tensorboard_logdir=<a folder you can write> or training.tensorboard=False"
    ), last
    assert "Traceback" not in output
