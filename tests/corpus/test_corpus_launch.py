"""`build_corpus.py launch`: the corpus build as submitit jobs. With the local executor on the
tiny world: the jobs' merged output is byte for byte a single run's, a shard that fails once is
submitted again (its log named), an interrupted launch resumes without redoing finished
shards. With the Slurm executor (submission mocked): the sbatch scripts of the job arrays."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

import pytest

from mmf_uvlp.corpus.launch import Launcher, launch, submit
from mmf_uvlp.corpus.pipeline import ABORT_ENV, build
from mmf_uvlp.utils.cluster import JobOptions

from helpers import REPO
from helpers.corpus import (
    output_files,
    shared_resources,
    tiny_command,
    tiny_config,
    write_tiny_world,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return write_tiny_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """An uninterrupted single run: the bytes every launch must reproduce."""
    out = str(tmp_path_factory.mktemp("reference"))
    build(tiny_config(world), out, resources=shared_resources())
    return out


def _chunk_files(out: str) -> dict:
    found = {}
    for root, _, files in os.walk(out):
        for name in files:
            if name.startswith(("chunk-", "part-")) and ".tmp." not in name:
                stat = os.stat(os.path.join(root, name))
                found[os.path.relpath(os.path.join(root, name), out)] = (
                    stat.st_ino,
                    stat.st_mtime_ns,
                )
    return found


@pytest.mark.slow
def test_launch_on_the_local_executor_equals_a_single_run_and_retries_a_failed_shard(
    world, reference, tmp_path, monkeypatch, caplog
):
    # shard 0 of 2 owns chunks 0 and 2: each of its jobs exits after linking 2 chunks, so its
    # first attempt fails (before writing its index) and the second finishes it
    monkeypatch.setenv(ABORT_ENV, "link:2")
    out = tmp_path / "launched"
    options = JobOptions(executor="local", time_min=30, array_parallelism=2)
    with caplog.at_level(logging.INFO, logger="mmf_uvlp.corpus.launch"):
        report = launch(tiny_config(world), str(out), 2, options, progress=False, poll_s=0.5)
    assert report["output"]["images"] == 5
    assert output_files(str(out)) == output_files(reference)
    retried = [
        r.getMessage() for r in caplog.records if "failed (attempt 1 of 3)" in r.getMessage()
    ]
    assert len(retried) == 1 and retried[0].startswith("shard 0/2 failed"), retried
    log = retried[0].split("; log ")[1].split(";")[0]
    assert log.startswith(str(out / "launch" / "shards")) and os.path.exists(log)
    submitted = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("shard ") and ": job " in r.getMessage()
    ]
    assert sorted(m.split(":")[0] for m in submitted) == ["shard 0/2", "shard 0/2", "shard 1/2"]
    # the sentence cache was embedded in two parts, then assembled: no part file is left
    assert not list((out / "sentences").glob("embeddings.part-*"))
    assert len(list((out / "launch" / "embed").glob("*_result.pkl"))) == 2

    # everything done: a second launch submits nothing
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mmf_uvlp.corpus.launch"):
        launch(tiny_config(world), str(out), 2, options, progress=False)
    assert not [r for r in caplog.records if ": job " in r.getMessage()]
    assert len([r for r in caplog.records if "already done" in r.getMessage()]) == 4


@pytest.mark.slow
def test_an_interrupted_launch_resumes_without_redoing_finished_shards(world, reference, tmp_path):
    out = tmp_path / "launched"
    command = tiny_command(world, "launch", str(out))
    command += ["--shards", "3", "--array-parallelism", "1"]
    # Ctrl-C reaches the launcher even where the test runner was started with SIGINT ignored
    # (a background job of a shell, nohup): a Python started so would ignore it too.
    first = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    watchdog = threading.Timer(900, first.kill)
    watchdog.start()
    printed = ""
    # One job at a time: shard 1 is submitted once shard 0 is done. Ctrl-C as its line is
    # printed, while its job starts: the launcher stops that local job and exits.
    for line in first.stdout:
        printed += line
        if "shard 1/3: job" in line:
            first.send_signal(signal.SIGINT)
            break
    printed += first.communicate(timeout=120)[0]
    watchdog.cancel()
    assert "shard 1/3: job" in printed and first.returncode != 0, printed[-3000:]
    assert (out / "shards" / "shard-0000-of-0003" / "shared.json").exists()
    assert not (out / "annotations" / "index.json").exists()
    finished = _chunk_files(str(out / "shards" / "shard-0000-of-0003"))

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "embed: 3 of 3 jobs already done" in again.stderr
    assert "shard 0/3: job" not in again.stderr  # finished before the interrupt: not redone
    assert "shard 2/3: job" in again.stderr
    assert _chunk_files(str(out / "shards" / "shard-0000-of-0003")) == finished
    assert output_files(str(out)) == output_files(reference)


def test_slurm_job_arrays_and_their_sbatch_scripts(world, tmp_path):
    from submitit.core.test_core import MockedSubprocess

    options = JobOptions(
        executor="slurm",
        partition="learnfair",
        time_min=240,
        gpus=1,
        cpus=8,
        mem_gb=32,
        array_parallelism=2,
        slurm=(("account", "vision"), ("constraint", "volta32gb")),
    )
    launcher = Launcher(tiny_config(world), str(tmp_path / "out"), 4, options, progress=False)
    phases = dict(launcher.phases())
    assert [len(phases[name]) for name in ("embed", "index", "shards", "merge")] == [4, 1, 4, 1]
    assert [t.args[2] for t in phases["shards"]] == [(i, 4) for i in range(4)]
    assert launcher.threads == 8  # each job uses its --cpus
    mock = MockedSubprocess(known_cmds=["srun"])
    with mock.context():
        executor = options.executor_for(tmp_path / "out" / "launch" / "shards", "corpus-shards")
        jobs = submit(executor, phases["shards"])
        again = submit(executor, phases["shards"][1:2])  # a failed shard submitted again
    array_id = jobs[0].job_id.split("_")[0]
    assert [job.job_id for job in jobs] == [f"{array_id}_{i}" for i in range(4)]
    script = jobs[0].paths.submission_file.read_text()
    sbatch = {line.split()[1] for line in script.splitlines() if line.startswith("#SBATCH")}
    assert {
        "--array=0-3%2",
        "--partition=learnfair",
        "--time=240",
        "--gpus-per-node=1",
        "--cpus-per-task=8",
        "--mem=32GB",
        "--account=vision",
        "--constraint=volta32gb",
        "--job-name=corpus-shards",
    } <= sbatch, sbatch
    single = again[0].paths.submission_file.read_text()
    assert "--array" not in single and "--partition=learnfair" in single
    assert again[0].job_id == str(int(array_id) + 1) and "_" not in again[0].job_id


def test_job_options_are_checked_and_named():
    with pytest.raises(ValueError, match="--executor"):
        JobOptions(executor="ray")
    with pytest.raises(ValueError, match="--cpus"):
        JobOptions(cpus=0)
    assert JobOptions(executor="local", cpus=None).threads(parallel=1) >= 1
    assert JobOptions(executor="slurm").parallelism() is None  # Slurm schedules the array


def test_a_launch_refuses_an_output_of_another_config(world, tmp_path):
    out = tmp_path / "out"
    first = Launcher(tiny_config(world), str(out), 2, JobOptions(), progress=False)
    first._check_out()
    other = Launcher(tiny_config(world, "retrieve.k=4"), str(out), 2, JobOptions(), progress=False)
    with pytest.raises(RuntimeError, match="another config or shard count"):
        other._check_out()
    with pytest.raises(RuntimeError, match="another config or shard count"):
        Launcher(tiny_config(world), str(out), 3, JobOptions(), progress=False)._check_out()


class _Ended:
    """A finished job whose result raises ``error`` (submitit's own exception types)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def result(self):
        raise self.error


def test_a_failed_job_is_told_in_one_line():
    from submitit.core.utils import FailedJobError, UncompletedJobError

    from mmf_uvlp.corpus.launch import _failure

    trace = (
        'Traceback (most recent call last):\n  File "pipeline.py", line 9, in build\n'
        "ValueError: predictions.tsv:3: boxes: expected 4 numbers"
    )
    failed = FailedJobError(  # the message submitit builds for a job that raised
        "Job (task=0) failed during processing with trace:\n----------------------\n"
        f"{trace}\n----------------------\nYou can check full logs with 'job.stderr(0)' and "
        "'job.stdout(0)'or at paths:\n  - /x/1_0_log.err\n  - /x/1_0_log.out"
    )
    assert _failure(_Ended(failed)) == "ValueError: predictions.tsv:3: boxes: expected 4 numbers"
    killed = UncompletedJobError(
        "Job 11559 (task: 0) with path /x/11559_0_result.pkl\nhas not "
        "produced any output (state: NO PROCESS AND NO RESULT)\nNo "
        "error stream produced. Look at stdout: /x/11559_0_log.out"
    )
    assert _failure(_Ended(killed)) == (
        "the job ended without a result (state NO PROCESS AND NO RESULT: it exited, was killed "
        "or ran out of time or memory)"
    )


def test_a_slurm_job_of_an_interrupted_launch_still_running_is_waited_for(world, tmp_path):
    from submitit.core.test_core import MockedSubprocess

    from mmf_uvlp.corpus.launch import Launcher

    options = JobOptions(executor="slurm", partition="learnfair")
    launcher = Launcher(tiny_config(world), str(tmp_path / "out"), 2, options, progress=False)
    shards = dict(launcher.phases())["shards"]
    launcher.folder.mkdir(parents=True)
    launcher._record("shards", "shard-0", "41")
    launcher._record("shards", "shard-1", "42")
    mock = MockedSubprocess(known_cmds=["srun"])
    with mock.context():
        mock.set_job_state("41", "RUNNING")
        job = launcher._reattach("shards", shards[0])
        assert job is not None and job.job_id == "41"
        mock.set_job_state("42", "FAILED")
        assert launcher._reattach("shards", shards[1]) is None  # submitted again instead
    local = Launcher(tiny_config(world), str(tmp_path / "out"), 2, JobOptions(), progress=False)
    assert local._reattach("shards", shards[0]) is None  # local jobs end with their launcher


@pytest.mark.slow
def test_a_damaged_part_of_a_finished_launch_is_found_and_rebuilt_on_rerun(
    world, reference, tmp_path, caplog
):
    out = tmp_path / "launched"
    options = JobOptions(executor="local", time_min=30, array_parallelism=2)
    config = tiny_config(world)
    launch(config, str(out), 2, options, progress=False, poll_s=0.5)
    part = out / "annotations" / "part-000000.jsonl.gz"
    whole = part.read_bytes()
    part.write_bytes(whole[:50])
    with caplog.at_level(logging.INFO, logger="mmf_uvlp.corpus.launch"):
        report = launch(config, str(out), 2, options, progress=False, poll_s=0.5)
    warned = [r.getMessage() for r in caplog.records if str(part) in r.getMessage()]
    assert warned == [
        f"{part} holds 50 bytes, {len(whole)} when written (damaged or cut "
        "short); its job is run again"
    ], warned
    assert report["output"]["images"] == 5
    assert output_files(str(out)) == output_files(reference)
    submitted = [r.getMessage() for r in caplog.records if ": job " in r.getMessage()]
    assert [m.split(":")[0] for m in submitted] == ["merge"], submitted  # the shards were whole


def _launch_command(world: dict, out) -> list:
    return [
        sys.executable,
        str(REPO / "tools" / "build_corpus.py"),
        "launch",
        "--predictions",
        world["predictions"],
        "--features",
        world["features"],
        "--corpus",
        world["corpus"],
        "--k",
        "3",
        "--chunk-images",
        "2",
        "--set",
        "embed.chunk_size=5",
        "--set",
        "embed.batch_size=4",
        "--no-progress",
        "--out",
        str(out),
        "--shards",
        "2",
        "--array-parallelism",
        "1",
    ]


def _job_processes(out) -> list:
    """PIDs of the processes whose command line names a folder of ``out/launch``: the local
    executor's job controllers and tasks."""
    prefix = os.path.join(str(out), "launch", "")
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                args = handle.read().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue
        if entry.isdigit() and any(arg.startswith(prefix) for arg in args):
            found.append(int(entry))
    return found


def _wait_for(condition, seconds: float = 20.0):
    import time

    deadline = time.time() + seconds
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    return condition()


def _start_launch_until_a_job_runs(command: list) -> tuple:
    """The launch started, read up to its first job's line; with that job's processes."""
    launcher = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    printed = ""
    for line in launcher.stdout:
        printed += line
        if ": job " in line:
            break
    return launcher, printed


def _end(pids: list) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads processes from /proc")
def test_sigterm_to_the_launcher_stops_its_local_jobs(world, tmp_path):
    out = tmp_path / "launched"
    launcher, printed = _start_launch_until_a_job_runs(_launch_command(world, out))
    try:
        assert _wait_for(lambda: len(_job_processes(out)) >= 2), printed  # controller, task
        launcher.send_signal(signal.SIGTERM)
        printed += launcher.communicate(timeout=120)[0]
        assert launcher.returncode == 128 + signal.SIGTERM, printed[-3000:]
        assert _wait_for(lambda: not _job_processes(out), 15), (
            _job_processes(out),
            printed[-3000:],
        )
    finally:
        launcher.kill()
        _end(_job_processes(out))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads processes from /proc")
def test_jobs_that_outlive_a_sigkilled_launcher_are_ended_by_the_next_launch(world, tmp_path):
    out = tmp_path / "launched"
    command = _launch_command(world, out)
    first, printed = _start_launch_until_a_job_runs(command)
    second = None
    try:
        assert _wait_for(lambda: len(_job_processes(out)) >= 2), printed  # controller, task
        first.kill()  # SIGKILL: the launcher cannot stop its jobs
        first.wait(timeout=60)
        orphans = _job_processes(out)
        assert orphans, "no local job outlived the killed launcher"
        second = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        watchdog = threading.Timer(600, second.kill)
        watchdog.start()
        told = ""
        for line in second.stdout:
            told += line
            if "processes of an earlier launch" in line or ": job " in line:
                break
        watchdog.cancel()
        assert told.splitlines()[-1].startswith(
            f"ending {len(orphans)} processes of an earlier launch of {out} that outlived it "
            f"(pids {', '.join(map(str, sorted(orphans)))})"
        ), told[-3000:]
        assert _wait_for(lambda: not set(orphans) & set(_job_processes(out)), 15), told
    finally:
        first.kill()
        if second is not None:
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=120)
        _end(_job_processes(out))
