"""A run folder is owned by one process at a time (mmf_uvlp/training/run_lock.py)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import MarkerSoftFileLock

from mmf_uvlp.errors import RunFolderBusy
from mmf_uvlp.training.run_lock import LOCK_FILE, RunLock

from helpers import REPO


HOLD = """
import sys, time
from mmf_uvlp.training.run_lock import RunLock
lock = RunLock(sys.argv[1])  # held while the object lives
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def _hold(folder: Path) -> subprocess.Popen:
    """Another process that owns ``folder`` until it is killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.fixture
def holder(tmp_path):
    """Another process that owns ``tmp_path / 'run'`` until the test ends."""
    folder = tmp_path / "run"
    process = _hold(folder)
    yield folder, process
    process.kill()
    process.wait()


def _write_lock(folder: Path, pid: int, host: str, start: int | None = None) -> None:
    """A lock file as filelock's MarkerSoftFileLock writes it (its owner record, protocol 2)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["filelock/2", f"pid={pid}", f"host={host}", "mode=exclusive"]
    lines += [] if start is None else [f"start={start}"]
    (folder / LOCK_FILE).write_text("".join(f"{line}\n" for line in lines))


def _ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _owner_pid(folder: Path) -> int:
    """The pid filelock reads from the folder's lock file."""
    return MarkerSoftFileLock(str(folder / LOCK_FILE)).owner.pid


def test_a_second_owner_is_refused_naming_the_first(holder):
    folder, process = holder
    with pytest.raises(RunFolderBusy) as busy:
        RunLock(folder).acquire()
    message = str(busy.value)
    assert message.startswith(
        f"run folder {folder} is in use by pid {process.pid} on host {socket.gethostname()} ("
    )
    assert f"-c {' '.join(HOLD.split())[:20]}" in message  # the owner's command, one line
    assert f"its lock is {folder / LOCK_FILE}" in message and "\n" not in message
    assert _owner_pid(folder) == process.pid


def test_a_second_lock_of_the_same_process_is_refused(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunFolderBusy, match=f"in use by pid {os.getpid()} "):
            RunLock(tmp_path).acquire()
        assert _owner_pid(tmp_path) == os.getpid()


def test_a_lock_is_released_at_the_end_and_after_an_error(tmp_path):
    with RunLock(tmp_path) as lock:
        assert lock.owner.pid == os.getpid() == _owner_pid(tmp_path)
    assert not (tmp_path / LOCK_FILE).exists()
    with pytest.raises(KeyError):
        with RunLock(tmp_path):
            raise KeyError("the run failed")
    assert not (tmp_path / LOCK_FILE).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left either


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, caplog):
    process = _hold(tmp_path)
    process.kill()
    process.wait()
    assert _owner_pid(tmp_path) == process.pid  # a killed run leaves its lock
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.training.run_lock"):
        with RunLock(tmp_path) as lock:
            assert lock.owner.pid == os.getpid()
    assert f"taking over the lock of pid {process.pid} on host" in caplog.text
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_stale_lock_of_this_host_is_taken_over(tmp_path, caplog):
    pid = _ended_pid()
    _write_lock(tmp_path, pid, socket.gethostname())
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.training.run_lock"):
        with RunLock(tmp_path) as lock:
            assert lock.owner.pid == os.getpid()
    assert f"taking over the lock of pid {pid} on host" in caplog.text


def test_a_pid_reused_by_another_process_is_stale(tmp_path):
    _write_lock(tmp_path, os.getppid(), socket.gethostname(), start=1)
    with RunLock(tmp_path):
        pass


def test_a_live_owner_of_this_host_is_kept(tmp_path):
    _write_lock(tmp_path, os.getppid(), socket.gethostname())  # no start time: the pid decides
    with pytest.raises(RunFolderBusy, match=f"in use by pid {os.getppid()} on host"):
        RunLock(tmp_path).acquire()


def test_a_lock_of_another_host_is_kept_and_named(tmp_path):
    _write_lock(tmp_path, _ended_pid(), "gpu-node-7")
    with pytest.raises(
        RunFolderBusy,
        match="on host gpu-node-7 .*that host cannot be checked "
        "from here: if that run is over, delete the lock",
    ):
        RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("text", ["[1, 2]", '{"pid": 4242, "host": "gpu-node-7"}'])
def test_a_lock_file_that_is_not_a_lock_is_named(tmp_path, text):
    (tmp_path / LOCK_FILE).write_text(text)
    with pytest.raises(
        RunFolderBusy,
        match=rf"{tmp_path / LOCK_FILE} is not a run lock "
        r"\(expected filelock's owner record: filelock/2, pid=..., host=..., mode=...\); "
        "delete it if no run uses its folder",
    ):
        RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).read_text() == text


def test_mmf_run_releases_its_folder_when_the_run_fails(tmp_path, monkeypatch):
    """MMF's main runs under the lock of env.save_dir, removed when it raises."""
    import mmf_cli.run as cli
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    seen = []

    def build_trainer(config):
        seen.append(_owner_pid(tmp_path))
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
