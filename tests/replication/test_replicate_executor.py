"""`replicate --executor`: the study's steps as submitit jobs. On the local executor: the runner's
order, records and outputs with commands run as jobs; a failed job named; and on the tiny world
the same results as the local pool."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mmf_uvlp.replication.executor import JobRun
from mmf_uvlp.replication.runner import StepFailed, run_steps
from mmf_uvlp.replication.steps import Step
from mmf_uvlp.utils.cluster import JobOptions

from helpers import REPO


# a step's command: record the job's process id and finish the step (its proof file)
FINISH = (
    "import os, sys, pathlib; d = pathlib.Path(sys.argv[1]); d.mkdir(parents=True, "
    "exist_ok=True); (d / 'pid').write_text(str(os.getpid())); print('made', d.name); "
    "(d / 'done').write_text('ok')"
)


def _step(tmp_path: Path, name: str, kind: str = "finetune", **kwargs) -> Step:
    folder = tmp_path / name
    return Step(
        kind,
        name,
        (sys.executable, "-c", FINISH, str(folder)),
        folder,
        folder / "step.json",
        proof_file=folder / "done",
        **kwargs,
    )


@pytest.mark.slow
def test_steps_run_as_local_jobs_in_order_with_records_and_outputs(tmp_path, capsys):
    world = _step(tmp_path, "world", kind="world")
    pretrain = replace(
        _step(tmp_path, "pretrain", kind="pretrain"), system="uvla", seed=0, task="pretrain"
    )
    finetunes = [
        replace(_step(tmp_path, task), system="uvla", seed=0, task=task)
        for task in ("vqa2", "nlvr2")
    ]
    steps = [world, pretrain, *finetunes]
    lines = []
    run = JobRun(
        JobOptions(executor="local", time_min=10), tmp_path / "jobs", REPO, lines.append, poll_s=0.2
    )
    assert run_steps(steps, run=run, log=lines.append, jobs=2) == 4
    jobs = [line.split()[1].rstrip(",") for line in lines if line.startswith("    job ")]
    assert len(jobs) == 4
    for step, job in zip(steps, jobs):
        assert json.loads(step.record.read_text())["command"] == list(step.command)
        assert step.record.with_suffix(".out").read_text() == f"made {step.folder.name}\n"
    # each command ran in its own job process, none in this one; the fine-tunings after the
    # pre-training they read
    pids = {int((step.folder / "pid").read_text()) for step in steps}
    assert len(pids) == 4 and not pids & {__import__("os").getpid()}
    started = [line for line in lines if line.startswith("\n=== ")]
    assert "pretrain" in started[1] and {"vqa2", "nlvr2"} == {
        s.split("] ")[1].split(" |")[0] for s in started[2:]
    }
    # one job at a time: the job's output on the terminal, not submitit's own lines
    single = _step(tmp_path, "single")
    capsys.readouterr()
    assert run_steps([single], run=run, log=lines.append, jobs=1) == 1
    printed = capsys.readouterr().out
    assert "made single" in printed and "submitit INFO" not in printed


@pytest.mark.slow
def test_a_failing_job_fails_its_step_with_its_exit_status(tmp_path):
    failing = Step(
        "finetune",
        "bad",
        (sys.executable, "-c", "import sys; sys.exit(3)"),
        tmp_path / "bad",
        tmp_path / "bad" / "step.json",
        proof_file=tmp_path / "bad" / "done",
    )
    run = JobRun(
        JobOptions(executor="local", time_min=10),
        tmp_path / "jobs",
        REPO,
        lambda line: None,
        poll_s=0.2,
    )
    with pytest.raises(StepFailed, match=r"bad failed \(exit code 3\)"):
        run_steps([failing], run=run, log=lambda line: None, jobs=2)
    assert not failing.record.exists()


ARGS = [
    "--seeds",
    "1",
    "--systems",
    "base,random_pairs",
    "--tasks",
    "refcoco_plus",
    "--model-config",
    "configs/models/uvla/tiny_random.yaml",
    "--pretrain-updates",
    "2",
    "--finetune-updates",
    "2",
    "--jobs",
    "2",
]


@pytest.mark.slow
def test_replicate_on_the_local_executor_equals_the_local_pool(tiny_world, tmp_path):
    results = {}
    for name, extra in (("pool", []), ("jobs", ["--executor", "local", "--time", "60"])):
        runs, out = tmp_path / name / "runs", tmp_path / name / "out"
        command = [
            sys.executable,
            "-m",
            "mmf_uvlp.cli.replicate",
            "--world",
            str(tiny_world),
            "--runs",
            str(runs),
            "--out",
            str(out),
            *ARGS,
            *extra,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=2400, cwd=REPO)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        entries = json.loads((out / "runs.json").read_text())["runs"]
        results[name] = {(e["system"], e["task"]): e["metrics"] for e in entries}
        if name == "jobs":
            assert result.stdout.count("    job ") == 5  # pre-training, fine-tunings, splits
            assert len(list((runs / "jobs").glob("*_result.pkl"))) == 5
    assert len(results["pool"]) == 5 and all(results["pool"].values())
    assert results["jobs"] == results["pool"]
