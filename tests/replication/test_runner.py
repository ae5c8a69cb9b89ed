"""The replication runner: skip / resume / records, the world a run was made on, steps made
again, parallel jobs and their order, and the archive that carries a study to another clone."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from mmf_uvlp.replication.archive import Archive
from mmf_uvlp.replication.runner import (
    StaleRun,
    StepFailed,
    prerequisites,
    read_record,
    run_steps,
    set_aside_previous_log,
    stale_reason,
    waiting_on,
)
from mmf_uvlp.replication.steps import Settings, Step, plan, setup_steps, system_steps
from mmf_uvlp.replication.study import SYSTEMS
from mmf_uvlp.replication.world import World
from mmf_uvlp.toy_world import PRESETS

from helpers import REPO
from helpers.replication import write_train_log


# ----------------------------------------------------------------------------- runner


def _step(tmp_path: Path, name: str, command: tuple = ("tool", "--x", "1"), **kwargs) -> Step:
    folder = tmp_path / name
    return Step(
        "finetune",
        name,
        command,
        folder,
        folder / "step.json",
        proof_file=folder / "done",
        **kwargs,
    )


def _finish(command) -> int:
    folder = Path(command[-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "done").write_text("ok")
    (folder / "current.ckpt").write_text("ckpt")
    return 0


def test_runner_skips_done_steps_records_runs_and_prunes(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    first = _step(
        tmp_path, "a", ("tool", str(tmp_path / "a")), prune=(tmp_path / "a" / "current.ckpt",)
    )
    second = _step(tmp_path, "b", ("tool", str(tmp_path / "b")))
    calls, lines = [], []
    assert (
        run_steps([first, second], run=lambda c: calls.append(c) or _finish(c), log=lines.append)
        == 2
    )
    record = json.loads(first.record.read_text())
    assert record["command"] == list(first.command) and record["wall_s"] >= 0
    assert record["threads"] == 3
    assert not (tmp_path / "a" / "current.ckpt").exists()
    assert (tmp_path / "b" / "current.ckpt").exists()  # nothing to prune
    assert re.search(r"\[1/2\] a \| elapsed 0:00:00 \| ETA unknown", "\n".join(lines))
    assert re.search(r"\[2/2\] b \| elapsed .* \| ETA 0:00:00", "\n".join(lines))
    # Again: nothing runs.
    assert run_steps([first, second], run=lambda c: calls.append(c) or 1, log=lines.append) == 0
    assert len(calls) == 2
    # Settings changed: a finished run is not silently reused.
    changed = _step(tmp_path, "a", ("tool", str(tmp_path / "a"), "--updates", "5"))
    with pytest.raises(StaleRun, match=r"\['--updates', '5'\]"):
        run_steps([changed], run=_finish, log=lines.append)
    assert "['--updates', '5']" in stale_reason(changed, read_record(changed))
    assert stale_reason(first, read_record(first)) is None


def test_runner_runs_only_the_kinds_asked_and_still_checks_the_finished_ones(tmp_path):
    """``kinds`` (replicate --recorded): the other steps are left as they are, but a finished
    one made by another command is refused all the same."""
    world = Step(
        "world",
        "world",
        ("tool", str(tmp_path / "w")),
        tmp_path / "w",
        tmp_path / "w" / "step.json",
        proof_file=tmp_path / "w" / "done",
    )
    run = _step(tmp_path, "a", ("tool", str(tmp_path / "a")))
    calls = []
    assert (
        run_steps(
            [world, run],
            run=lambda c: calls.append(c) or _finish(c),
            log=lambda line: None,
            kinds=("world",),
        )
        == 1
    )
    assert calls == [world.command] and world.done() and not run.done()
    assert run_steps([world, run], run=_finish, log=lambda line: None) == 1
    changed = _step(tmp_path, "a", ("tool", str(tmp_path / "a"), "--updates", "5"))
    with pytest.raises(StaleRun, match=r"\['--updates', '5'\]"):
        run_steps([world, changed], run=_finish, log=lambda line: None, kinds=("world",))


def test_a_world_made_with_other_settings_than_its_preset_s_is_refused(tmp_path):
    world = World(tmp_path / "toy_world_tiny", "tiny")
    step = setup_steps([], Settings(world, tmp_path / "runs"))[0]
    config = PRESETS["tiny"].to_json()
    del config["caption_style"]  # a setting added later, at its default: still this world
    world.path.mkdir()
    (world.path / "world.json").write_text(json.dumps({"config": config}))
    assert step.done() and world.drift() is None
    assert run_steps([step], run=_finish, log=lambda line: None) == 0
    (world.path / "world.json").write_text(
        json.dumps({"config": {**config, "nlvr2_pairs": [6, 2, 2]}})
    )
    with pytest.raises(
        StaleRun,
        match=r"world\.json was generated with nlvr2_pairs \[6, 2, 2\] "
        r"where the preset now has \[16, 8, 8\]: .*move",
    ):
        run_steps([step], run=_finish, log=lambda line: None)
    assert "seed 0 where the preset now has 3" in World(world.path, "tiny").drift(seed=3)


def test_a_run_records_the_world_settings_its_task_reads(tmp_path):
    """Each run's record keeps the preset world's settings that its files depend on: an
    NLVR2 run those of NLVR2's statements and none of another task's; pre-training none of
    a downstream task's."""
    settings = Settings(World(tmp_path / "toy_world_tiny", "tiny"), tmp_path / "runs")
    steps = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, settings)}
    nlvr2, vqa, pretrain = steps["nlvr2"], steps["vqa2"], steps["pretrain"]
    assert {"nlvr2_classes", "nlvr2_statements", "nlvr2_pairs", "num_images"} <= set(nlvr2.world)
    assert "vqa2_questions" not in nlvr2.world and "nlvr2_pairs" not in vqa.world
    assert not {"vqa2_questions", "nlvr2_pairs", "ve_hypotheses", "refcoco_images"} & set(
        pretrain.world
    )
    assert steps["refcoco_plus_splits"].world == steps["refcoco_plus"].world
    run_steps(
        [nlvr2],
        log=lambda line: None,
        run=lambda command: (
            write_train_log(nlvr2.folder, "progress: 10/10, test/nlvr2/accuracy: 0.5000") or 0
        ),
    )
    assert read_record(nlvr2)["world"] == nlvr2.world
    assert World(tmp_path / "data", None).settings_for("nlvr2") is None


def test_a_run_made_on_a_world_with_other_task_settings_is_refused(tmp_path):
    """A finished NLVR2 run whose record says its world's NLVR2 statements named every
    class is stale once the preset names 4: refused with the setting named, while a VQA
    run of that world stays valid (its files did not change). A record that does not say
    its world (written before records kept it) is refused too."""
    world = World(tmp_path / "toy_world_tiny", "tiny")
    settings = Settings(world, tmp_path / "runs")
    steps = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, settings)}
    for step, made_on in (
        (steps["nlvr2"], {**steps["nlvr2"].world, "nlvr2_classes": 4}),
        (steps["vqa2"], steps["vqa2"].world),
    ):
        step.record.parent.mkdir(parents=True)
        step.record.write_text(json.dumps({"command": list(step.command), "world": made_on}))
    assert stale_reason(steps["vqa2"], read_record(steps["vqa2"])) is None
    reason = stale_reason(steps["nlvr2"], read_record(steps["nlvr2"]))
    assert "nlvr2_classes 4 where the world now has 0" in reason and "delete" in reason
    # a setting added to worlds after the record was written counts at its default
    older = {k: v for k, v in steps["vqa2"].world.items() if k != "caption_style"}
    assert "caption_style" in steps["vqa2"].world
    assert (
        stale_reason(steps["vqa2"], {"command": list(steps["vqa2"].command), "world": older})
        is None
    )
    legacy = {"command": list(steps["nlvr2"].command)}
    assert "does not say which world" in stale_reason(steps["nlvr2"], legacy)
    data = Settings(World(tmp_path / "data", None), tmp_path / "runs2")
    other = {step.task: step for step in system_steps(SYSTEMS["uvla"], 0, data)}["nlvr2"]
    assert stale_reason(other, {"command": list(other.command)}) is None  # no preset


def _pretrain_again(tmp_path: Path, value: str, lines: list[str]) -> Step:
    """A pre-training step that finished once (record and log, weights gone) made again by
    a command that logs ``val/x: value``."""
    checkpoint = tmp_path / "p" / "current.ckpt"
    step = _step(
        tmp_path, "p", ("tool", str(tmp_path / "p")), resumes_from=checkpoint, prune=(checkpoint,)
    )

    def run(command) -> int:
        step.folder.mkdir(exist_ok=True)
        with open(step.folder / "train.log", "a") as log:  # MMF appends to an existing log
            log.write(f"progress: 8/8, val/x: {value}, val/y: 0.5000\n")
        return _finish(command)

    assert run_steps([step], run=run, log=lines.append) == 1
    return step


def test_a_finished_step_made_again_writes_its_own_log_and_is_compared_with_it(tmp_path):
    lines = []
    step = _pretrain_again(tmp_path, "0.2500", lines)
    (step.folder / "done").unlink()  # its weights gone: it runs again
    _pretrain_again(tmp_path, "0.2500", lines)
    assert (step.folder / "train.log").read_text().count("progress") == 1
    assert not (step.folder / "train.previous.log").exists()
    assert lines[-2] == "=== p: made again, the same 2 val/test values as its previous run"
    (step.folder / "done").unlink()
    _pretrain_again(tmp_path, "0.7500", lines)
    assert lines[-2] == (
        "=== p: made again, and 1 of 2 val/test values differ from its "
        "previous run: val/x 0.25 -> 0.75"
    )


def test_a_step_made_again_keeps_the_log_it_resumes_or_drops_a_partial_one(tmp_path):
    step = _step(tmp_path, "p", ("tool",), resumes_from=tmp_path / "p" / "current.ckpt")
    step.folder.mkdir()
    step.record.write_text("{}")
    log, previous = step.folder / "train.log", step.folder / "train.previous.log"
    log.write_text("finished run")
    set_aside_previous_log(step)
    assert previous.read_text() == "finished run" and not log.exists()
    log.write_text("interrupted before its first checkpoint")
    set_aside_previous_log(step)
    assert previous.read_text() == "finished run" and not log.exists()
    log.write_text("interrupted after a checkpoint")
    step.resumes_from.write_text("ckpt")
    set_aside_previous_log(step)
    assert log.read_text() == "interrupted after a checkpoint"


def test_runner_stops_on_a_failed_or_impossible_step(tmp_path):
    failing = _step(tmp_path, "a", ("tool", str(tmp_path / "a")))
    with pytest.raises(StepFailed, match="exit code 3"):
        run_steps([failing], run=lambda c: 3, log=lambda line: None)
    assert not failing.record.exists()
    with pytest.raises(StepFailed, match="output is missing"):
        run_steps([failing], run=lambda c: 0, log=lambda line: None)
    needy = _step(tmp_path, "b", needs=tmp_path / "x" / "current.ckpt")
    with pytest.raises(StepFailed, match=r"delete .*x to run that fine-tuning again"):
        run_steps([needy], run=_finish, log=lambda line: None)


def test_runner_jobs_run_independent_steps_together_and_respect_prerequisites(tmp_path):
    world = _step(tmp_path, "world", ("tool", str(tmp_path / "world")))
    steps = [world]
    for system in ("base", "uvla"):
        for task in (["pretrain"] if system == "uvla" else []) + ["vqa2", "refcoco_plus"]:
            steps.append(
                replace(
                    _step(
                        tmp_path, f"{system}-{task}", ("tool", str(tmp_path / f"{system}-{task}"))
                    ),
                    kind="pretrain" if task == "pretrain" else "finetune",
                    system=system,
                    seed=0,
                    task=task,
                )
            )
        steps.append(
            replace(
                _step(tmp_path, f"{system}-splits", ("tool", str(tmp_path / f"{system}-splits"))),
                kind="evaluate",
                system=system,
                seed=0,
                task="refcoco_plus_splits",
            )
        )
    titles = [s.title for s in steps]
    needs = prerequisites(steps)
    assert [sorted(titles[j] for j in n) for n in needs] == [
        [],
        ["world"],
        ["world"],
        ["base-refcoco_plus", "world"],
        ["world"],
        ["uvla-pretrain", "world"],
        ["uvla-pretrain", "world"],
        ["uvla-pretrain", "uvla-refcoco_plus", "world"],
    ]
    lock, active, peak, order = threading.Condition(), [0], [0], []

    def run(command, output):
        with lock:  # after the world, a command waits (up to 10 s) until two run at once
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            lock.notify_all()
            if Path(command[1]).name != "world":
                lock.wait_for(lambda: peak[0] >= 2, timeout=10)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("console")
        with lock:
            active[0] -= 1
            order.append(Path(command[1]).relative_to(tmp_path).as_posix())
        return _finish(command)

    assert run_steps(steps, run=run, log=lambda line: None, jobs=2) == len(steps)
    assert peak[0] == 2
    for i, step in enumerate(steps):
        position = order.index(Path(step.command[1]).relative_to(tmp_path).as_posix())
        for j in needs[i]:
            assert (
                order.index(Path(steps[j].command[1]).relative_to(tmp_path).as_posix()) < position
            )
        assert step.record.with_suffix(".out").read_text() == "console"
    # A failure starts nothing new and names the step.
    again = [_step(tmp_path, "x", ("tool", str(tmp_path / "x")))]
    with pytest.raises(StepFailed, match="x failed \\(exit code 4\\)"):
        run_steps(again, run=lambda command, output: 4, log=lambda line: None, jobs=2)


def _chains(tmp_path: Path, units: Sequence[tuple[str, int]]) -> list[Step]:
    """VQA and NLVR2 fine-tunings of each (system, seed), after its pre-training unless Base."""
    steps = []
    for system, seed in units:
        tasks = (["pretrain"] if system != "base" else []) + ["vqa2", "nlvr2"]
        for task in tasks:
            name = f"{system}{seed}-{task}"
            steps.append(
                replace(
                    _step(tmp_path, name, ("tool", str(tmp_path / name))),
                    kind="pretrain" if task == "pretrain" else "finetune",
                    system=system,
                    seed=seed,
                    task=task,
                )
            )
    return steps


def _started(lines: Sequence[str]) -> list[str]:
    return [
        re.search(r"=== \[\d+/\d+\] (\S+) \|", line).group(1)
        for line in lines
        if " | elapsed " in line
    ]


def test_runner_starts_the_steps_others_wait_for_first(tmp_path):
    """Base's fine-tunings come first in the plan, but the pre-trainings of both seeds start
    before them: a waiting pre-training would leave its fine-tunings for the end."""
    steps = _chains(tmp_path, [("base", 0), ("uvla", 0), ("uvla", 1)])
    assert waiting_on(prerequisites(steps)) == [0, 0, 2, 0, 0, 2, 0, 0]
    lines = []
    assert run_steps(
        steps, run=lambda command, output: _finish(command), log=lines.append, jobs=2
    ) == len(steps)
    assert _started(lines)[:2] == ["uvla0-pretrain", "uvla1-pretrain"]


def test_runner_finishes_a_pre_training_s_fine_tunings_before_the_next_pre_training(tmp_path):
    """A pre-training's weights may not outlive the session (a study restored from its archive
    makes them again): its fine-tunings go before another seed's pre-training."""
    steps = _chains(tmp_path, [("uvla", 0), ("uvla", 1)])
    lines = []
    assert run_steps(steps, run=_finish, log=lines.append) == len(steps)
    assert _started(lines) == [
        "uvla0-pretrain",
        "uvla0-vqa2",
        "uvla0-nlvr2",
        "uvla1-pretrain",
        "uvla1-vqa2",
        "uvla1-nlvr2",
    ]


def test_runner_evaluates_a_finished_fine_tuning_before_the_next_one(tmp_path):
    """The RefCOCO+ splits come last in the plan but run as soon as their fine-tuning ends:
    a session that stops mid-study keeps the cells, and the checkpoint they read goes."""

    def step(name: str, task: str, seed: int = 0, **kwargs) -> Step:
        return replace(
            _step(tmp_path, name, ("tool", str(tmp_path / name))),
            system="base",
            seed=seed,
            task=task,
            **kwargs,
        )

    refcoco = step("refcoco", "refcoco_plus")
    later = [step(name, name) for name in ("vqa2", "nlvr2")]
    splits = step(
        "splits",
        "refcoco_plus_splits",
        kind="evaluate",
        needs=tmp_path / "refcoco" / "current.ckpt",
    )
    # The next seed's RefCOCO+ has a step waiting on it (its splits), the splits none: they
    # still go first.
    refcoco_1 = step("refcoco_1", "refcoco_plus", seed=1)
    splits_1 = step(
        "splits_1",
        "refcoco_plus_splits",
        seed=1,
        kind="evaluate",
        needs=tmp_path / "refcoco_1" / "current.ckpt",
    )
    lines = []
    assert (
        run_steps([refcoco, *later, splits, refcoco_1, splits_1], run=_finish, log=lines.append)
        == 6
    )
    assert _started(lines) == ["refcoco", "splits", "refcoco_1", "splits_1", "vqa2", "nlvr2"]


def _complete(steps) -> callable:
    """A fake ``mmf_run`` / tool: each step's proof, and a ``train.log`` in each run folder."""
    by_command = {step.command: step for step in steps}

    def run(command) -> int:
        step = by_command[tuple(command)]
        if step.proof_file is not None:
            step.proof_file.parent.mkdir(parents=True, exist_ok=True)
            step.proof_file.write_text("made")
        keys = step.proof_keys or ("val/total_loss",)
        if step.kind != "corpus":
            write_train_log(
                step.folder, "progress: 2/2, " + ", ".join(f"{key}: 0.5000" for key in keys)
            )
        return 0

    return run


def _two_clones(tmp_path: Path, clone: str, **kwargs) -> tuple[Settings, list[Step]]:
    root = tmp_path / clone
    settings = Settings(
        World(root / "data" / "world"),
        root / "data" / "runs",
        seeds=(0,),
        tasks=("vqa2", "nlvr2"),
        **kwargs,
    )
    return settings, plan([SYSTEMS["base"], SYSTEMS["uvla"]], settings)


def test_an_archive_carries_a_study_to_another_clone(tmp_path):
    """Finished runs archived by one clone count as done in another clone in another folder
    whose runs folder is empty: nothing runs again, not even the pre-training whose weights
    are gone, until a run its weights feed is missing."""
    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    assert run_steps(
        steps, run=_complete(steps), log=lambda line: None, on_done=archive.store
    ) == len(steps)
    pretrain = next(step for step in steps if step.kind == "pretrain")
    copy = tmp_path / "archive" / "uvla" / "seed0" / "pretrain"
    assert sorted(p.name for p in copy.iterdir()) == ["step.json", "train.log"]
    command = json.loads((copy / "step.json").read_text())["command"]
    assert command[1:] == [
        arg.replace(str(settings.runs), "<runs>").replace(str(settings.world.path), "<world>")
        for arg in pretrain.command[1:]
    ]
    assert not any(str(tmp_path / "one") in arg for arg in command[1:])
    assert command[0] == f"<bin>/{Path(pretrain.command[0]).name}"  # the same in any clone
    assert (tmp_path / "archive" / "setup" / "corpus.json").exists()  # the corpus: its record

    other, steps = _two_clones(tmp_path, "two")
    archive = Archive(tmp_path / "archive", other)
    assert [archive.restore(step) for step in steps] == [True] * len(steps)
    assert not any(archive.restore(step) for step in steps)  # restored once
    assert read_record(steps[2])["command"] == list(steps[2].command)  # this clone's paths
    lines = []
    assert (
        run_steps(steps, run=lambda command: pytest.fail(f"ran {command}"), log=lines.append) == 0
    )
    assert not (other.runs / "uvla" / "seed0" / "pretrain" / "uvla_final.pth").exists()
    assert sum("every step that reads its output is done" in line for line in lines) == 2

    # A fine-tuning of μ-VLA deleted from both: its corpus and pre-training run again first.
    vqa = next(s for s in steps if s.system == "uvla" and s.task == "vqa2")
    shutil.rmtree(vqa.folder)
    shutil.rmtree(tmp_path / "archive" / vqa.folder.relative_to(other.runs))
    ran = []
    run_steps(
        steps,
        run=lambda command: ran.append(command) or _complete(steps)(command),
        log=lambda line: None,
    )
    assert [by.kind for c in ran for by in steps if by.command == tuple(c)] == [
        "corpus",
        "pretrain",
        "finetune",
    ]


def test_a_step_made_again_by_the_same_command_leaves_its_archived_copy(tmp_path):
    """A step made again by the command its archived copy holds (replicate --recorded makes
    the world again for the trivial rates) leaves the archive as it is: the committed archive
    stays unchanged; a step made by another command replaces its copy."""
    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    run_steps(steps, run=_complete(steps), log=lambda line: None, on_done=archive.store)
    step = next(s for s in steps if s.kind == "pretrain")
    copy = tmp_path / "archive" / step.record.relative_to(settings.runs)
    archived = copy.read_bytes()
    record = json.loads(step.record.read_text())
    step.record.write_text(json.dumps({**record, "wall_s": 99.0, "finished": "later"}))
    assert archive.store(step) and copy.read_bytes() == archived
    step.record.write_text(json.dumps({**record, "command": [*record["command"], "x=1"]}))
    assert archive.store(step)
    assert json.loads(copy.read_text())["command"][-1] == "x=1"


def test_an_archived_run_of_other_settings_is_refused_and_bad_records_named(tmp_path):
    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    run_steps(steps, run=_complete(steps), log=lambda line: None, on_done=archive.store)
    other, steps = _two_clones(tmp_path, "two", finetune_updates=7)
    archive = Archive(tmp_path / "archive", other)
    for step in steps:
        archive.restore(step)
    with pytest.raises(StaleRun, match=r"training.max_updates=7"):
        run_steps(steps, run=_complete(steps), log=lambda line: None)
    record = tmp_path / "archive" / "base" / "seed0" / "vqa2" / "step.json"
    record.write_text("{")
    third, steps = _two_clones(tmp_path, "three")
    with pytest.raises(ValueError, match=re.escape(f"{record}:1: not valid json")):
        Archive(tmp_path / "archive", third).restore(
            next(s for s in steps if s.system == "base" and s.task == "vqa2")
        )


def test_a_run_that_does_not_say_its_world_is_refused_before_it_is_archived(tmp_path):
    """A runs folder left from before records kept their world (here an NLVR2 run of a
    preset world) is refused when a study starts, and never reaches the archive, where it
    would pass for a run of the world as it is now."""
    settings = Settings(
        World(tmp_path / "toy_world_tiny", "tiny"), tmp_path / "runs", seeds=(0,), tasks=("nlvr2",)
    )
    nlvr2 = next(s for s in plan([SYSTEMS["base"]], settings) if s.task == "nlvr2")
    write_train_log(nlvr2.folder, "progress: 2/2, test/nlvr2/accuracy: 0.5000")
    nlvr2.record.write_text(json.dumps({"command": list(nlvr2.command)}))
    archive = Archive(tmp_path / "archive", settings)
    with pytest.raises(StaleRun, match="does not say which world"):
        run_steps([nlvr2], run=_finish, log=lambda line: None, on_done=archive.store)
    assert not archive.holds(nlvr2)


def test_make_replicate_keeps_the_calibrated_study_in_its_archive():
    def dry_run(*variables: str) -> str:
        result = subprocess.run(
            ["make", "-n", "replicate", *variables],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split())

    assert "--archive results/archive/calibrated" in dry_run("RECIPE=calibrated", "TABLES=1")
    assert "--archive" not in dry_run("RECIPE=calibrated", "ARCHIVE=")
    assert "--archive" not in dry_run("TABLES=1")
    assert (REPO / "results" / "archive" / "calibrated").is_dir()


def test_a_pre_training_made_again_with_other_weights_is_archived_beside_the_first(tmp_path):
    """A seed whose fine-tunings did not all finish in one clone: the other clone makes its
    pre-training again (weights are not archived), and on another processor that gives other
    weights. Each fine-tuning's record names the weights it read, a pre-training's the
    weights it wrote, and the archive keeps the first pre-training beside the new one."""

    def weights_by(content: str, steps: Sequence[Step]) -> callable:
        complete = _complete(steps)

        def run(command) -> int:
            code = complete(command)
            step = next(s for s in steps if s.command == tuple(command))
            if step.kind == "pretrain":
                step.proof_file.write_text(content)
            return code

        return run

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    settings, steps = _two_clones(tmp_path, "one")
    archive = Archive(tmp_path / "archive", settings)
    run_steps(
        steps, run=weights_by("weights A", steps), log=lambda line: None, on_done=archive.store
    )
    records = {
        s.task if s.kind == "finetune" else s.kind: read_record(s)
        for s in steps
        if s.system == "uvla"
    }
    assert records["pretrain"]["weights_sha256"] == sha("weights A")
    assert {records[task]["pretrained_sha256"] for task in ("vqa2", "nlvr2")} == {sha("weights A")}
    assert "pretrained_sha256" not in read_record(next(s for s in steps if s.system == "base"))

    other, steps = _two_clones(tmp_path, "two")
    archive = Archive(tmp_path / "archive", other)
    nlvr2 = next(s for s in steps if (s.system, s.task) == ("uvla", "nlvr2"))
    shutil.rmtree(tmp_path / "archive" / nlvr2.folder.relative_to(other.runs))
    for step in steps:
        archive.restore(step)
    run_steps(
        steps, run=weights_by("weights B", steps), log=lambda line: None, on_done=archive.store
    )
    assert read_record(nlvr2)["pretrained_sha256"] == sha("weights B")
    copy = tmp_path / "archive" / "uvla" / "seed0" / "pretrain"
    assert sorted(p.name for p in copy.iterdir()) == [
        "step.earlier1.json",
        "step.json",
        "train.earlier1.log",
        "train.log",
    ]
    assert json.loads((copy / "step.json").read_text())["weights_sha256"] == sha("weights B")
    assert json.loads((copy / "step.earlier1.json").read_text())["weights_sha256"] == sha(
        "weights A"
    )
    vqa2 = tmp_path / "archive" / "uvla" / "seed0" / "vqa2" / "step.json"
    assert json.loads(vqa2.read_text())["pretrained_sha256"] == sha("weights A")

    # Made again with the same weights (the same processor): the archive stays as it is.
    pretrain = next(s for s in steps if s.kind == "pretrain")
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    record = read_record(pretrain)
    pretrain.record.write_text(json.dumps({**record, "wall_s": 1.0}))
    assert archive.store(pretrain)
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before
