"""A run folder is owned by one process at a time (mmf_uvlp/training/run_lock.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmf_uvlp.errors import RunFolderBusy
from mmf_uvlp.training.run_lock import LOCK_FILE, Owner, RunLock

from helpers import REPO


HOLD = """
import sys, time
from mmf_uvlp.training.run_lock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process that owns ``tmp_path / 'run'`` until the test ends."""
    folder = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "held"
    yield folder, process
    process.kill()
    process.wait()


def _write_lock(folder: Path, **fields) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "host": socket.gethostname(),
        "process": None,
        "started": "then",
        "command": ["mmf_run", "config=x.yaml"],
        **fields,
    }
    (folder / LOCK_FILE).write_text(json.dumps(record))


def _ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_second_owner_is_refused_naming_the_first(holder):
    folder, process = holder
    with pytest.raises(RunFolderBusy) as busy:
        RunLock(folder).acquire()
    message = str(busy.value)
    assert message.startswith(
        f"run folder {folder} is in use by pid {process.pid} on host {socket.gethostname()} ("
    )
    assert f"its lock is {folder / LOCK_FILE}" in message and "\n" not in message
    assert json.loads((folder / LOCK_FILE).read_text())["pid"] == process.pid


def test_a_lock_is_released_at_the_end_and_after_an_error(tmp_path):
    with RunLock(tmp_path) as lock:
        assert Owner.read(lock.path).pid == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()
    with pytest.raises(KeyError):
        with RunLock(tmp_path):
            raise KeyError("the run failed")
    assert not (tmp_path / LOCK_FILE).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left either


def test_a_stale_lock_of_this_host_is_taken_over(tmp_path, caplog):
    pid = _ended_pid()
    _write_lock(tmp_path, pid=pid)
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.training.run_lock"):
        with RunLock(tmp_path) as lock:
            assert Owner.read(lock.path).pid == os.getpid()
    assert f"taking over the lock of pid {pid} on host" in caplog.text


def test_a_pid_reused_by_another_process_is_stale(tmp_path):
    _write_lock(tmp_path, pid=os.getppid(), process="another boot:1")
    with RunLock(tmp_path):
        pass


def test_a_lock_of_another_host_is_kept_and_named(tmp_path):
    _write_lock(tmp_path, pid=_ended_pid(), host="gpu-node-7")
    with pytest.raises(
        RunFolderBusy,
        match="on host gpu-node-7 .*that host cannot be checked "
        "from here: if that run is over, delete the lock",
    ):
        RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).exists()


def test_a_lock_file_that_is_not_a_lock_is_named(tmp_path):
    (tmp_path / LOCK_FILE).write_text("[1, 2]")
    with pytest.raises(
        RunFolderBusy,
        match=rf"{tmp_path / LOCK_FILE} is not a run lock "
        r"\(expected a JSON object with 'pid' and 'host'\)",
    ):
        RunLock(tmp_path).acquire()


def test_mmf_run_releases_its_folder_when_the_run_fails(tmp_path, monkeypatch):
    """MMF's main runs under the lock of env.save_dir, removed when it raises."""
    import mmf_cli.run as cli
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    seen = []

    def build_trainer(config):
        seen.append(Owner.read(tmp_path / LOCK_FILE).pid)
        raise RuntimeError("no data")

    monkeypatch.setattr(cli, "build_trainer", build_trainer)
    setup_imports()
    # a run of the plugin's trainer (MMF's own visual_bert chooses it; it takes the lock)
    opts = [
        "model=visual_bert",
        "dataset=vqa2",
        f"env.save_dir={tmp_path}",
        "training.trainer=uvlp",
    ]
    configuration = Configuration(argparse.Namespace(config_override=None, opts=opts))
    with pytest.raises(RuntimeError, match="no data"):
        cli.main(configuration)
    assert seen == [os.getpid()]
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_second_mmf_run_into_a_busy_folder_stops_naming_the_owner(holder):
    folder, process = holder
    (folder / "models").mkdir()
    (folder / "models" / "model_4.ckpt").write_bytes(b"the first run's weights")
    start = time.perf_counter()
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("mmf_run")),
            "config=projects/uvla/pretrain.yaml",
            f"env.save_dir={folder}",
            "training.max_updates=2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"mmf_run: error: run folder {folder} is in use by pid {process.pid} on host ")
    )
    assert "Traceback" not in result.stderr
    assert (folder / "models" / "model_4.ckpt").read_bytes() == b"the first run's weights"
    assert not (folder / "train.log").exists()
    assert time.perf_counter() - start < 300
