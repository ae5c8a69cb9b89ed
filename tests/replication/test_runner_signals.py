"""The replication runner: a stopped runner leaves no command running, a step is done only
with its record, records are checked, a resumed run's record lists the stopped starts it
continues, and one runner at a time owns a seed's runs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from mmf_uvlp.replication import runner
from mmf_uvlp.replication.aggregate import seed_cells
from mmf_uvlp.replication.children import Children
from mmf_uvlp.replication.runner import BadRecord, StaleRun, read_record, run_steps, started_path
from mmf_uvlp.replication.steps import Step

from helpers import REPO


PREFIX = "2026-01-01T00:00:00 | INFO | mmf.train : "

# A command standing in for mmf_run: it starts a worker of its own (as MMF's data loader
# does) and runs until stopped, or, once ``go`` exists in its folder, finishes at once. The
# worker ignores the stop signals, as one that swallowed a KeyboardInterrupt while starting
# does: it ends only if the runner kills what is left of the command's process group.
WORKER = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(300)
"""
CHILD = f"""
import os, subprocess, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
folder.mkdir(parents=True, exist_ok=True)
if (folder / "go").exists():
    (folder / "done").write_text("weights")
    sys.exit(0)
worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline() == "ready\\n"
with open(folder / "pids", "a") as f:
    f.write(f"{{os.getpid()}} {{worker.pid}}\\n")
time.sleep(300)
"""
DRIVER = """
import sys
from pathlib import Path
from mmf_uvlp.replication.children import Interrupted
from mmf_uvlp.replication.runner import run_steps
from mmf_uvlp.replication.steps import Step
folder = Path(sys.argv[1])
step = Step("finetune", "fake run", (sys.executable, "-c", sys.argv[2], str(folder)), folder,
            folder / "step.json", proof_file=folder / "done", system="s", seed=0, task="t")
try:
    run_steps([step], log=lambda line: print(line, flush=True))
except Interrupted as e:
    print(e, file=sys.stderr)
    sys.exit(128 + e.signum)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_for(path: Path, timeout: float = 120) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def _driver(folder: Path) -> list[str]:
    return [sys.executable, "-c", DRIVER, str(folder), CHILD]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_runner_stops_its_commands_and_a_rerun_starts_clean(tmp_path, signum):
    folder = tmp_path / "run"
    driver = subprocess.Popen(
        _driver(folder), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pids = [int(pid) for pid in _wait_for(folder / "pids").split()]
    try:
        driver.send_signal(signum)
        _, err = driver.communicate(timeout=60)
        end = time.monotonic() + 10
        while any(map(_alive, pids)) and time.monotonic() < end:
            time.sleep(0.1)
        assert [pid for pid in pids if _alive(pid)] == []  # command and its worker: no orphan
    finally:
        for pid in [driver.pid, *pids]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert driver.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert (
        f"stopped by {name}: 0 steps finished in this call, stopped: fake run; run the "
        "study again to resume it" in err
    )
    assert not (folder / "step.json").exists()

    (folder / "go").touch()  # the rerun's command finishes
    result = subprocess.run(_driver(folder), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads((folder / "step.json").read_text())["title"] == "fake run"
    assert not (folder / "step.started.json").exists()
    assert len((folder / "pids").read_text().splitlines()) == 1  # no second sleeper started


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Popen's process_group is 3.11's")
def test_a_command_has_a_process_group_of_its_own_in_the_runners_session(tmp_path):
    probe = "import os, sys; print(os.getpid(), os.getpgid(0), os.getsid(0), len(sys.stdin.read()))"
    output = tmp_path / "out"
    assert Children().run([sys.executable, "-c", probe], cwd=tmp_path, output=output) == 0
    pid, group, session, read = map(int, output.read_text().split())
    assert read == 0  # nothing to read: no stop on a terminal's input
    assert group == pid  # the runner's signals reach the command and its workers
    assert session == os.getsid(0)  # so the runner's scheduling group, and its nice


def _log_step(tmp_path: Path, updates: int) -> Step:
    folder = tmp_path / "vqa2"
    return Step(
        "finetune",
        "fine-tune on vqa2",
        ("mmf_run", f"training.max_updates={updates}"),
        folder,
        folder / "step.json",
        proof_keys=("test/vqa2/vqa_accuracy",),
        system="base",
        seed=0,
        task="vqa2",
    )


def _finish(step: Step) -> int:
    step.folder.mkdir(parents=True, exist_ok=True)
    (step.folder / "train.log").write_text(
        PREFIX + "progress: 4/4, test/vqa2/vqa_accuracy: 0.7500\n"
    )
    return 0


def _stop_before_the_record(monkeypatch, step: Step) -> list:
    """Run ``step`` with a runner that dies after its command ended, before its record."""
    calls = []

    def die(step, wall, made):
        raise KeyboardInterrupt("the runner is killed")

    monkeypatch.setattr(runner, "_record", die)
    with pytest.raises(KeyboardInterrupt):
        run_steps(
            [step],
            run=lambda command: calls.append(command) or _finish(step),
            log=lambda line: None,
        )
    monkeypatch.undo()
    return calls


def test_a_step_is_not_done_without_its_record(tmp_path, monkeypatch):
    """Stopped between the end of its command and its record: the step's output is there but
    it is not done, so a rerun runs it again (MMF resumes) and writes its record."""
    step = _log_step(tmp_path, 4)
    calls = _stop_before_the_record(monkeypatch, step)
    assert step.has_output() and not step.record.exists() and not step.done()
    assert seed_cells([step]) == {}  # no table cell from a run without its record
    assert (
        run_steps(
            [step],
            run=lambda command: calls.append(command) or _finish(step),
            log=lambda line: None,
        )
        == 1
    )
    assert len(calls) == 2 and step.done()
    assert read_record(step)["command"] == list(step.command)
    assert not started_path(step).exists()
    assert seed_cells([step]) == {("base", 0): {("vqa2", "test"): 0.75}}


def test_a_study_re_planned_with_other_updates_refuses_an_unrecorded_run(tmp_path, monkeypatch):
    """A run of 4 updates stopped before its record; the study now plans 6: the run is not
    resumed (nor tabulated) under a plan it was not started with."""
    _stop_before_the_record(monkeypatch, _log_step(tmp_path, 4))
    replanned = _log_step(tmp_path, 6)
    with pytest.raises(StaleRun) as stale:
        run_steps([replanned], run=lambda command: _finish(replanned), log=lambda line: None)
    message = str(stale.value)
    assert (
        "holds a run started, not finished, with another command "
        "(['training.max_updates=4'] where the study now has ['training.max_updates=6']"
        in message
        and str(started_path(replanned)) in message
    )
    assert seed_cells([replanned]) == {}


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "[1, 2]",
            "expected a JSON object with a 'command' list of strings (the record the "
            "runner writes for a step), got a JSON list",
        ),
        (
            "{}",
            "field 'command': expected a JSON object with a 'command' list of strings (the "
            "record the runner writes for a step), got None",
        ),
        ('{"command": ["mmf_run"], "wall_s": "long"}', "field 'wall_s': expected seconds"),
        (
            '{"command": ["mmf_run"], "interrupted": [{"wall_s": "long"}]}',
            "field 'interrupted': expected a list of the run's stopped starts, each an object with "
            "'wall_s' seconds or null",
        ),
    ],
)
def test_a_malformed_record_is_named(tmp_path, text, expected):
    step = _log_step(tmp_path, 4)
    _finish(step)
    step.record.write_text(text)
    with pytest.raises(BadRecord) as bad:
        run_steps([step], run=lambda command: 0, log=lambda line: None)
    assert str(bad.value).startswith(f"{step.record}")
    assert expected in str(bad.value)


def _replicate(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mmf_uvlp.cli.replicate",
            "--world",
            str(tmp_path / "world"),
            "--runs",
            str(tmp_path / "runs"),
            "--systems",
            "base",
            "--tables",
            "1",
            "--tasks",
            "vqa2",
            "--plan",
            *options,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "[1, 2]",
            ": expected a JSON object with a 'command' list of strings (the record the "
            "runner writes for a step), got a JSON list; delete it to run the step again",
        ),
        (
            "{}",
            ": field 'command': expected a JSON object with a 'command' list of strings (the "
            "record the runner writes for a step), got None; delete it to run the step again",
        ),
        (
            '{"command": ["mmf_run"',
            ":1: not valid json (Expecting ',' delimiter); expected a JSON object",
        ),
    ],
)
def test_replicate_names_a_malformed_record_in_one_line(tmp_path, text, expected):
    (tmp_path / "world").mkdir()
    run = tmp_path / "runs" / "base" / "seed0" / "vqa2"
    run.mkdir(parents=True)
    (run / "train.log").write_text(PREFIX + "progress: 4/4, test/vqa2/vqa_accuracy: 0.7500\n")
    (run / "step.json").write_text(text)
    result = _replicate(tmp_path, "--seeds", "1")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"replicate: error: {run / 'step.json'}{expected}")


HOLD = """
import sys, time
from mmf_uvlp.training.run_lock import RunLock
lock = RunLock(sys.argv[1], name="seed0.lock")  # held while the object lives
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_runner_of_the_same_seeds_is_refused_naming_the_first(tmp_path):
    (tmp_path / "world").mkdir()
    runs = tmp_path / "runs"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(runs)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert first.stdout.readline().strip() == "held"
        second = _replicate(tmp_path, "--seeds", "2")
        assert second.returncode == 2
        assert second.stderr.strip().startswith(
            f"replicate: error: seed 0 of the runs folder {runs} is in use by pid {first.pid} "
            "on host "
        )
        other_seed = _replicate(tmp_path, "--seeds", "2", "--only-seeds", "1")
        assert other_seed.returncode == 0, other_seed.stderr  # lanes taking other seeds share it
    finally:
        first.kill()
        first.wait()
    assert sorted(p.name for p in runs.iterdir()) == ["seed0.lock"]  # the killed holder's
    assert _replicate(tmp_path, "--seeds", "2").returncode == 0  # stale: taken over
    assert not (runs / "seed0.lock").exists() and not (runs / "seed1.lock").exists()


def _stopped_start(
    tmp_path: Path, step: Step, commit: str, monkeypatch, *, checkpoint: bool, seconds: int
) -> None:
    """A start of ``step`` made by ``commit`` that logs, writes a checkpoint or not, and
    is stopped (exit 1) ``seconds`` after it started (its files' times set so)."""
    monkeypatch.setattr(runner, "made_by", lambda command: {"commit": commit})

    def run(command) -> int:
        step.folder.mkdir(parents=True, exist_ok=True)
        (step.folder / "train.log").write_text("progress: 2/4\n")
        if checkpoint:
            step.resumes_from.write_text("ckpt")
        return 1

    with pytest.raises(runner.StepFailed):
        run_steps([step], run=run, log=lambda line: None)
    began = datetime.fromisoformat(json.loads(started_path(step).read_text())["started"])
    for path in step.folder.iterdir():
        if path.name != started_path(step).name:
            os.utime(path, (began.timestamp() + seconds,) * 2)


def test_a_resumed_run_lists_its_stopped_starts_and_sums_their_wall_time(tmp_path, monkeypatch):
    """A run stopped after a checkpoint and resumed by later calls is one run made by each
    start: its record lists the stopped ones, oldest first, with what made them and their
    wall time (start to last write), and ``wall_s`` adds them to the last start's."""
    step = replace(_log_step(tmp_path, 4), resumes_from=tmp_path / "vqa2" / "current.ckpt")
    _stopped_start(tmp_path, step, "first", monkeypatch, checkpoint=True, seconds=100)
    _stopped_start(tmp_path, step, "second", monkeypatch, checkpoint=True, seconds=30)
    monkeypatch.setattr(runner, "made_by", lambda command: {"commit": "third"})
    began = time.time()
    run_steps([step], run=lambda command: _finish(step), log=lambda line: None)
    record = read_record(step)
    starts = record["interrupted"]
    assert [start["commit"] for start in starts] == ["first", "second"]
    assert [start["wall_s"] for start in starts] == [100.0, 30.0]
    assert all(
        start["threads"] == runner.threads() and start["started"] <= start["stopped"]
        for start in starts
    )
    assert record["commit"] == "third"
    assert 130.0 <= record["wall_s"] <= 130.0 + time.time() - began
    assert not started_path(step).exists()


def test_a_run_restarted_from_scratch_lists_no_stopped_start(tmp_path, monkeypatch):
    """A start stopped before its first checkpoint left no work the next one continues."""
    step = replace(_log_step(tmp_path, 4), resumes_from=tmp_path / "vqa2" / "current.ckpt")
    _stopped_start(tmp_path, step, "first", monkeypatch, checkpoint=False, seconds=100)
    monkeypatch.setattr(runner, "made_by", lambda command: {"commit": "second"})
    run_steps([step], run=lambda command: _finish(step), log=lambda line: None)
    record = read_record(step)
    assert "interrupted" not in record and record["commit"] == "second"
    assert record["wall_s"] < 100


def test_a_resumed_fine_tuning_names_the_pre_trained_weights_it_started_from(tmp_path):
    """It goes on from its own checkpoint: pre-trained weights made again in between are
    not what it read."""
    pre_folder, folder = tmp_path / "pretrain", tmp_path / "vqa2"
    pre_folder.mkdir()
    weights = pre_folder / "final.pth"
    pretrain = Step(
        "pretrain",
        "pre-train",
        ("mmf_run", "pre"),
        pre_folder,
        pre_folder / "step.json",
        proof_file=weights,
        system="uvla",
        seed=0,
    )
    finetune = Step(
        "finetune",
        "fine-tune on vqa2",
        ("mmf_run", "fine"),
        folder,
        folder / "step.json",
        proof_file=folder / "done",
        resumes_from=folder / "current.ckpt",
        system="uvla",
        seed=0,
        task="vqa2",
    )

    def stopped(command) -> int:
        folder.mkdir(exist_ok=True)
        finetune.resumes_from.write_text("ckpt")
        return 1

    pretrain.record.write_text(json.dumps({"command": list(pretrain.command)}))
    weights.write_text("weights A")
    with pytest.raises(runner.StepFailed):
        run_steps([pretrain, finetune], run=stopped, log=lambda line: None)
    weights.write_text("weights B")
    run_steps(
        [pretrain, finetune],
        run=lambda command: (folder / "done").write_text("ok") * 0,
        log=lambda line: None,
    )
    record = read_record(finetune)
    first = hashlib.sha256(b"weights A").hexdigest()
    assert record["pretrained_sha256"] == first == record["interrupted"][0]["pretrained_sha256"]
