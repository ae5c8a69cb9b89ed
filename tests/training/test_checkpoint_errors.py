"""Checkpoint files that cannot be written or must not be read stop a run with one line
naming the file and the reason; a resume whose current.ckpt is missing continues from the
newest complete checkpoint and says so."""

import errno
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import torch

from mmf_uvlp.errors import CheckpointWriteError, DamagedCheckpoint, RefusedCheckpoint
from mmf_uvlp.trainers.checkpoint import atomic_torch_save, load_checkpoint

from helpers import HOLDOUT, MMF_RUN, REPO, TINY, rows, train_log
from helpers.crafted import CreatesFile


def full_disk_at(path: Path) -> None:
    """Writes of ``path`` by this process fail with ENOSPC: the temporary file the atomic save
    writes first is /dev/full."""
    os.symlink("/dev/full", f"{path}.tmp-{os.getpid()}")


def test_a_write_to_a_full_disk_names_enospc_and_the_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "model_4.ckpt"
    full_disk_at(target)
    with pytest.raises(CheckpointWriteError) as error:
        atomic_torch_save({"model": {"w": torch.zeros(10000)}}, str(target))
    assert str(error.value).startswith(
        f"cannot write checkpoint {target}: ENOSPC (No space left on device); the disk is full"
    )
    assert error.value.errno == errno.ENOSPC and "\n" not in str(error.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", ["torch.save", "pickle"])
def test_a_file_holding_code_is_refused_naming_the_file_and_the_object(tmp_path, fmt):
    crafted, ran = tmp_path / "crafted.ckpt", tmp_path / "ran"
    content = {"model": {"w": torch.zeros(2)}, "extra": CreatesFile(ran)}
    if fmt == "torch.save":
        torch.save(content, crafted)
    else:
        crafted.write_bytes(pickle.dumps(content))
    with pytest.raises(RefusedCheckpoint) as error:
        load_checkpoint(str(crafted))
    assert str(error.value).startswith(
        f"checkpoint {crafted} refused: it holds objects that are not "
        "plain data (io.open), which loading it would run as code"
    )
    assert "damaged" not in str(error.value) and not ran.exists()


def test_a_truncated_file_is_damaged_not_refused(tmp_path):
    whole, cut = tmp_path / "whole.ckpt", tmp_path / "cut.ckpt"
    torch.save({"model": {"w": torch.zeros(1000)}}, whole)
    cut.write_bytes(whole.read_bytes()[:600])
    assert load_checkpoint(str(whole))["model"]["w"].shape == (1000,)
    with pytest.raises(DamagedCheckpoint) as error:
        load_checkpoint(str(cut))
    assert str(error.value).startswith(f"checkpoint {cut} cannot be read (RuntimeError: ")
    assert str(error.value).endswith("the file is damaged or truncated") and "\n" not in str(
        error.value
    )


def mmf_run(
    tmp_path: Path,
    world: Path,
    save: Path,
    *opts: str,
    full_disk: str = "",
    env: Optional[dict] = None,
) -> subprocess.CompletedProcess:
    """mmf_run on the tiny world; ``full_disk``: the checkpoint file (relative to ``save``)
    whose write finds the disk full."""
    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    command = [
        MMF_RUN,
        f"config={config}",
        f"env.data_dir={world}",
        f"env.save_dir={save}",
        *HOLDOUT,
        *opts,
    ]
    if full_disk:
        driver = tmp_path / "full_disk_run.py"
        driver.write_text(
            "import os, sys\n"
            f"os.makedirs({str(save / 'models')!r}, exist_ok=True)\n"
            f"os.symlink('/dev/full', {str(save / full_disk)!r} + '.tmp-%d' % os.getpid())\n"
            "from mmf_cli.run import run\n"
            "sys.argv = ['mmf_run'] + sys.argv[1:]\n"
            "run()\n"
        )
        command = [sys.executable, str(driver), *command[1:]]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=dict(os.environ, **(env or {})),
    )


@pytest.mark.slow
def test_a_full_disk_stops_in_one_line_and_the_resume_falls_back_to_model_4(tiny_corpus, tmp_path):
    world, save = tiny_corpus.parent, tmp_path / "save"
    # the disk fills up while current.ckpt of update 4 is written: models/model_4.ckpt is complete
    result = mmf_run(tmp_path, world, save, "training.max_updates=8", full_disk="current.ckpt")
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: cannot write checkpoint {save / 'current.ckpt'}: ENOSPC "
        "(No space left on device); the disk is full"
    ), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "iostream" not in result.stderr
    assert (
        f"cannot write checkpoint {save / 'current.ckpt'}: ENOSPC"
        in (save / "train.log").read_text()
    )
    assert not (save / "current.ckpt").exists() and (save / "models/model_4.ckpt").exists()
    assert sorted(os.listdir(save / "models")) == ["model_4.ckpt"]

    before = len(train_log(save))
    resumed = mmf_run(tmp_path, world, save, "training.max_updates=8", "checkpoint.resume=True")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-3000:]
    message = (
        f"{save / 'current.ckpt'} is missing; resuming from {save / 'models/model_4.ckpt'}, "
        "the newest complete checkpoint"
    )
    assert message in output and message in (save / "train.log").read_text()
    assert [row["num_updates"] for row in rows(train_log(save)[before:])] == ["5", "6", "7", "8"]
    assert torch.load(save / "current.ckpt", weights_only=True)["num_updates"] == 8


@pytest.mark.slow
def test_a_crafted_resume_file_is_refused_in_one_line_and_runs_nothing(tiny_corpus, tmp_path):
    crafted, ran = tmp_path / "crafted.ckpt", tmp_path / "ran"
    torch.save({"model": {}, "optimizer": {}, "extra": CreatesFile(ran)}, crafted)
    # even with torch.load's default switched back to unpickling anything
    result = mmf_run(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "save",
        "training.max_updates=1",
        f"checkpoint.resume_file={crafted}",
        env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},
    )
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    assert not ran.exists(), "loading the resume file ran its code"
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"mmf_run: error: checkpoint {crafted} refused: it holds objects that are not plain "
        "data (io.open), which loading it would run as code; a checkpoint may hold only "
        "tensors, numpy arrays, numbers, strings and containers; if you trust this file "
        "and its origin, set checkpoint.trust_resume_file=True (it may then run code)"
    ), result.stderr[-3000:]


def _can_mount_a_tmpfs() -> bool:
    try:
        return (
            subprocess.run(
                ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
def test_a_full_tmpfs_during_a_checkpoint_names_enospc_the_file_and_the_free_space(
    tiny_corpus, tmp_path
):
    """env.save_dir on a real 20 MiB tmpfs (in a mount namespace of its own): models/model_4.ckpt
    (12 MiB) fits, current.ckpt after it does not; torch's own writer meets the ENOSPC."""
    if not _can_mount_a_tmpfs():
        pytest.skip("needs `unshare -rm` to mount a tmpfs (user namespaces)")
    save = tmp_path / "save"
    save.mkdir()
    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    command = " ".join(
        [
            MMF_RUN,
            f"config={config}",
            f"env.data_dir={tiny_corpus.parent}",
            f"env.save_dir={save}",
            *HOLDOUT,
            "training.max_updates=8",
        ]
    )
    check = (
        "import json, os, sys, torch; save = sys.argv[1]; "
        "print(json.dumps({'files': sorted(os.listdir(save)), "
        "'models': sorted(os.listdir(os.path.join(save, 'models'))), "
        "'model_4': torch.load(os.path.join(save, 'models', 'model_4.ckpt'), "
        "weights_only=True)['num_updates']}))"
    )
    script = (
        f"mount -t tmpfs -o size=20m tmpfs {save} && cd {REPO} && "
        f"{command} > {tmp_path / 'out.txt'} 2> {tmp_path / 'err.txt'}; "
        f'echo $? > {tmp_path / "rc"}; {sys.executable} -c "{check}" {save}'
    )
    state = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    stderr = (tmp_path / "err.txt").read_text()
    assert (tmp_path / "rc").read_text().strip() == "1", stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: cannot write checkpoint {save / 'current.ckpt'}: ENOSPC "
        "(No space left on device); the disk is full ("
    ), stderr[-3000:]
    assert f" MiB free in {save}): free space, then resume with checkpoint.resume=True" in last, (
        last
    )
    assert "Traceback" not in stderr and "inline_container" not in stderr
    files = json.loads(state.stdout.strip().splitlines()[-1])
    assert files["models"] == ["model_4.ckpt"] and files["model_4"] == 4, files
    assert "current.ckpt" not in files["files"] and not [f for f in files["files"] if ".tmp" in f]


@pytest.fixture(scope="module")
def checkpoint_of_4_updates(tiny_corpus, tmp_path_factory) -> Path:
    """models/model_4.ckpt of a tiny plugin run (8 updates, a checkpoint every 4)."""
    from helpers import pretrain

    tmp = tmp_path_factory.mktemp("four")
    pretrain(tmp, tiny_corpus.parent, tmp / "save", "training.max_updates=4")
    return tmp / "save" / "models" / "model_4.ckpt"


def _with(checkpoint: Path, target: Path, **extra) -> Path:
    """``checkpoint`` saved again to ``target`` with ``extra`` entries, as another tool does."""
    content = torch.load(checkpoint, weights_only=False)
    content.update(extra)
    torch.save(content, target)
    return target


@pytest.mark.slow
def test_a_resume_file_holding_a_numpy_rng_state_resumes_without_an_opt_in(
    tiny_corpus, checkpoint_of_4_updates, tmp_path
):
    import numpy as np

    from helpers import pretrain

    legacy = _with(
        checkpoint_of_4_updates,
        tmp_path / "legacy.ckpt",
        np_rng_state=np.random.get_state(),
        best_metric=np.float64(0.5),
    )
    output = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "save",
        "training.max_updates=8",
        f"checkpoint.resume_file={legacy}",
    )
    logged = rows(train_log(tmp_path / "save"))
    assert [row["num_updates"] for row in logged] == ["5", "6", "7", "8"], output[-3000:]
    assert "refused" not in output


@pytest.mark.slow
def test_a_resume_file_holding_other_objects_names_its_opt_in_and_loads_with_it(
    tiny_corpus, checkpoint_of_4_updates, tmp_path
):
    import argparse

    from helpers import pretrain

    legacy = _with(
        checkpoint_of_4_updates, tmp_path / "legacy.ckpt", args=argparse.Namespace(lr=0.1)
    )
    refused = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "refused",
        "training.max_updates=8",
        f"checkpoint.resume_file={legacy}",
        ok=False,
    )
    last = refused.strip().splitlines()[-1]
    assert last == (
        f"mmf_run: error: checkpoint {legacy} refused: it holds objects that are not "
        "plain data (argparse.Namespace), which loading it would run as code; a "
        "checkpoint may hold only tensors, numpy arrays, numbers, strings and "
        "containers; if you trust this file and its origin, set "
        "checkpoint.trust_resume_file=True (it may then run code)"
    ), refused[-3000:]
    trusted = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "trusted",
        "training.max_updates=8",
        f"checkpoint.resume_file={legacy}",
        "checkpoint.trust_resume_file=True",
    )
    logged = rows(train_log(tmp_path / "trusted"))
    assert [row["num_updates"] for row in logged] == ["5", "6", "7", "8"], trusted[-3000:]
    assert f"{legacy}: loaded as a trusted checkpoint" in trusted
