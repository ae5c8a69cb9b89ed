"""The README's Quick start, run line by line in its order from a fresh copy of the checkout
(an empty ``data/``, no ``save/``), on the tiny world.

The lines run as written, with ``PRESET=tiny`` in the environment of the ``make`` lines and,
appended to the ``mmf_run`` / ``mmf_predict`` lines, the tiny world's folder and feature size
and a few updates: every path one line hands the next (the world, ``save/uvla_pretrain``,
``save/uvla_vqa2``) is the README's own. ``make analyze`` and ``make replicate`` are run as
``make -n``: the first must name the pre-training the Quick start wrote, the second is the
study itself (its runs are tested in ``tests/replication/``).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO, fork_server
from helpers.docs import section_commands

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
# what the Quick start's lines are, in order (a new line must be added here and run)
PROGRAMS = ["make", "mmf_run", "mmf_run", "mmf_predict", "make", "make"]
TINY_WORLD = ["env.data_dir=data/toy_world_tiny", "model_config.uvla.feature_dim=64"]
FEW_UPDATES = ["training.max_updates=4", "training.batch_size=8", "training.log_interval=2",
               "training.checkpoint_interval=4", "training.evaluation_interval=4",
               "scheduler.params.num_warmup_steps=1"]
# the pre-training sets hold out every 6th image as their val split (50 leaves none of 48)
HOLDOUT = [f"dataset_config.uvla_{name}.holdout_every=6"
           for name in ("region_tag", "region_phrase", "image_sentence")]


def _fresh_copy(root: Path) -> Path:
    """A folder with this checkout's files (linked) and an empty ``data/``, no ``save/``."""
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("data", "save", ".git"):
            (root / entry.name).symlink_to(entry)
    (root / "data").mkdir()
    return root


def _environment() -> dict[str, str]:
    env = dict(os.environ, PRESET="tiny", HF_HUB_OFFLINE="1")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """``argv`` from ``cwd``: a console script in a child of the fork server, else a process."""
    if argv[0] in ("mmf_run", "mmf_predict"):
        result = fork_server().run([str(BIN / argv[0]), *argv[1:]], env=_environment(),
                                   cwd=cwd, timeout=600)
        return result["returncode"], str(result["output"])
    import subprocess

    done = subprocess.run(argv, cwd=cwd, env=_environment(), capture_output=True, text=True,
                          timeout=600)
    return done.returncode, done.stdout + done.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _excerpt(output: str, *needles: str) -> str:
    """The last line of ``output`` holding one of ``needles`` (else its last line)."""
    lines = [line for line in output.splitlines() if line.strip()]
    found = [line for line in lines if any(needle in line for needle in needles)]
    return (found or lines or [""])[-1][-300:]


def test_the_quick_start_runs_as_written_on_the_tiny_world(tmp_path):
    commands = section_commands(REPO / "README.md", "Quick start")
    argvs = [shlex.split(command) for command in commands]
    assert [argv[0] for argv in argvs] == PROGRAMS, commands
    root = _fresh_copy(tmp_path / "checkout")
    world, save = root / "data" / "toy_world_tiny", root / "save"
    printed = []

    # make toy-world corpus
    status, output = _run(argvs[0], root)
    assert status == 0, output[-3000:]
    assert (world / "corpus" / "annotations" / "index.json").is_file()
    printed.append(_excerpt(output, "finished in"))

    # pre-training: save/uvla_pretrain/
    status, output = _run([*argvs[1], *TINY_WORLD, *FEW_UPDATES, *HOLDOUT], root)
    assert status == 0, output[-3000:]
    pretrained = save / "uvla_pretrain" / "uvla_final.pth"
    assert pretrained.is_file(), sorted(os.listdir(save))
    weights = _digest(pretrained)
    printed.append(_excerpt(output, "Finished run in"))

    # fine-tuning from it: save/uvla_vqa2/, the pre-trained weights kept
    status, output = _run([*argvs[2], *TINY_WORLD, *FEW_UPDATES], root)
    assert status == 0, output[-3000:]
    assert ("from save/uvla_pretrain/uvla_final.pth; dropped on purpose: its heads itm, mlm, "
            "mrc, mrfr, pmrtc (28 tensors); this run trains its own: pooled_classifier") in output
    assert (save / "uvla_vqa2" / "uvla_final.pth").is_file()
    assert _digest(pretrained) == weights
    printed.append(_excerpt(output, "pre-trained tensors"))

    # MMF's own prediction entry point: the answers of every test question
    status, output = _run([*argvs[3], *TINY_WORLD], root)
    assert status == 0, output[-3000:]
    reports = glob.glob(str(save / "uvla_vqa2" / "vqa2_uvla_*" / "reports" / "*.json"))
    assert len(reports) == 1, output[-3000:]
    answers = json.loads(Path(reports[0]).read_text())
    test_set = np.load(world / "mmf" / "vqa2" / "annotations" / "imdb_test.npy",
                       allow_pickle=True)[1:]
    vocabulary = set((world / "mmf/vqa2/vocabs/answers_vqa.txt").read_text().split("\n"))
    assert sorted(a["question_id"] for a in answers) == sorted(q["question_id"] for q in test_set)
    assert all(a["answer"] in vocabulary for a in answers)
    printed.append(_excerpt(output, "Wrote evalai predictions"))

    # a checkpoint of another task is refused in one line
    status, output = _run(["mmf_run", "config=projects/uvla/finetune/refcoco_plus.yaml",
                           "run_type=inference", *TINY_WORLD,
                           "checkpoint.resume_file=save/uvla_vqa2/current.ckpt",
                           "datasets=refcoco_plus_val,refcoco_plus_testA"], root)
    assert status == 2, output[-3000:]
    assert ("mmf_run: error: checkpoint save/uvla_vqa2/current.ckpt does not fit this run: it "
            "was trained on vqa2, this run is on refcoco_plus_val,refcoco_plus_testA; it lacks "
            "6 tensors of this model (heads.region_scorer); it holds 6 that this model has not "
            "(heads.pooled_classifier)") in output

    # the analysis reads the Quick start's pre-training; the study is only planned
    for argv in argvs[4:]:
        status, output = _run(["make", "-n", *argv[1:]], root)
        assert status == 0, output[-3000:]
        printed.append(_excerpt(output, "probe_grounding", "replicate.py"))
    assert "μ-VLA=save/uvla_pretrain/uvla_final.pth" in printed[4]

    # the pre-training line again: refused, the weights kept
    status, output = _run([*argvs[1], *TINY_WORLD, *FEW_UPDATES, *HOLDOUT], root)
    assert status == 2, output[-3000:]
    assert "holds the final checkpoint of another run (uvla_final.pth" in output
    assert _digest(pretrained) == weights
    printed.append(_excerpt(output, "error:"))
    for command, line in zip([*commands, "(the pre-training again)"], printed):
        print(f"$ {command}\n    {line}")
