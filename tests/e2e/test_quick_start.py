"""The README's Quick start, pasted into a fresh login shell, on the tiny world.

Its lines are taken from the README's text and run in their order as one script by
``env -i HOME=<empty folder> PATH=/usr/bin:/bin bash -lc``: no variable of this process, no
Hugging Face setting, nothing but the README's switch ``export PRESET=tiny`` before them, in a
fresh copy of the checkout (its files linked, ``.venv`` the one ``make setup`` built, an
empty ``data/``, no ``save/``). Every path one line hands the next (the world,
``save/uvla_pretrain``, ``save/uvla_vqa2``) is the README's own. ``make replicate`` is run as
``make -n``: it is the study itself, whose runs are tested in ``tests/replication/``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO
from helpers.docs import section_commands

pytestmark = pytest.mark.slow

# what the Quick start's lines are, in order (a new line must be added here and run)
PROGRAMS = ["make", "source", "uvlp", "make", "mmf_run", "mmf_run", "mmf_predict", "make", "make"]
SWITCH = "export PRESET=tiny"
MARK = "::quick-start-line::"


def _fresh_copy(root: Path) -> Path:
    """A folder with this checkout's files (linked) and an empty ``data/``, no ``save/``."""
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("data", "save", ".git", "results"):
            (root / entry.name).symlink_to(entry)
    (root / "data").mkdir()
    (root / "results").mkdir()  # make analyze writes results/analysis here
    return root


def _login_shell(script: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    """``script`` in a fresh login shell: ``env -i`` with only a home and a plain PATH."""
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [
            "env",
            "-i",
            f"HOME={home}",
            "PATH=/usr/bin:/bin",
            "bash",
            "-lc",
            f"cd {shlex.quote(str(cwd))}\n{script}",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _outputs(output: str) -> list[str]:
    """The output of each line of the script (split at the marks it printed)."""
    return output.split(MARK)[1:]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_quick_start_pasted_into_a_fresh_shell_runs_on_the_tiny_world(tmp_path):
    commands = section_commands(REPO / "README.md", "Quick start")
    argvs = [shlex.split(command) for command in commands]
    assert [argv[0] for argv in argvs] == PROGRAMS, commands
    assert "PRESET" not in " ".join(commands)  # the switch is the one line the test adds
    runnable = [*commands[:-1], "make -n " + commands[-1].split(" ", 1)[1]]
    script = "\n".join(["set -e", SWITCH, *(f"echo {MARK}; {line}" for line in runnable)])
    root, home = _fresh_copy(tmp_path / "checkout"), tmp_path / "home"
    done = _login_shell(script, root, home)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = _outputs(done.stdout)
    assert len(lines) == len(commands), output[-4000:]
    world, save = root / "data" / "toy_world_tiny", root / "save"

    # the front door lists the run configs and the tools
    assert "projects/uvla/" in lines[2] and "finetune/vqa2.yaml" in lines[2], lines[2]
    assert "uvlp-build-corpus" in lines[2], lines[2]
    # the tiny world and its corpus; nothing from the demo world
    assert (world / "corpus" / "annotations" / "index.json").is_file()
    assert not (root / "data" / "toy_world_demo").exists()
    # pre-training on it, with the packaged MiniLM: nothing fetched from the network
    pretrained = save / "uvla_pretrain" / "uvla_final.pth"
    assert pretrained.is_file(), sorted(os.listdir(save))
    assert "huggingface.co" not in output and "Retrying" not in output
    # fine-tuning from it: save/uvla_vqa2/
    assert (
        "from save/uvla_pretrain/uvla_final.pth; dropped on purpose: its heads itm, mlm, "
        "mrc, mrfr, pmrtc (28 tensors); this run trains its own: pooled_classifier"
    ) in output
    assert (save / "uvla_vqa2" / "uvla_final.pth").is_file()
    # MMF's own prediction entry point: the answers of every test question
    reports = glob.glob(str(save / "uvla_vqa2" / "vqa2_uvla_*" / "reports" / "*.json"))
    assert len(reports) == 1, lines[6][-3000:]
    answers = json.loads(Path(reports[0]).read_text())
    test_set = np.load(world / "mmf" / "vqa2" / "annotations" / "imdb_test.npy", allow_pickle=True)[
        1:
    ]
    vocabulary = set((world / "mmf/vqa2/vocabs/answers_vqa.txt").read_text().split("\n"))
    assert sorted(a["question_id"] for a in answers) == sorted(q["question_id"] for q in test_set)
    assert all(a["answer"] in vocabulary for a in answers)
    # the analysis read the Quick start's pre-training; the study is only planned
    assert "μ-VLA=save/uvla_pretrain/uvla_final.pth" in lines[7], lines[7][-3000:]
    assert "--world tiny" in lines[8], lines[8]
    weights = _digest(pretrained)

    # the pre-training line again: refused in one line, the weights kept
    again = _login_shell("\n".join([SWITCH, commands[1], commands[4]]), root, home)
    assert again.returncode == 2, (again.stdout + again.stderr)[-3000:]
    last = (again.stdout + again.stderr).strip().splitlines()[-1]
    assert "holds the final checkpoint of another run (uvla_final.pth" in last, last
    assert _digest(pretrained) == weights

    # a checkpoint of another task is refused in one line
    other = _login_shell(
        "\n".join(
            [
                SWITCH,
                commands[1],
                "mmf_run config=projects/uvla/finetune/refcoco_plus.yaml run_type=inference "
                "checkpoint.resume_file=save/uvla_vqa2/current.ckpt "
                "datasets=refcoco_plus_val,refcoco_plus_testA",
            ]
        ),
        root,
        home,
    )
    assert other.returncode == 2, (other.stdout + other.stderr)[-3000:]
    assert (
        "mmf_run: error: checkpoint save/uvla_vqa2/current.ckpt does not fit this run: it "
        "was trained on vqa2, this run is on refcoco_plus_val,refcoco_plus_testA; it lacks "
        "6 tensors of this model (heads.region_scorer); it holds 6 that this model has not "
        "(heads.pooled_classifier)"
    ) in other.stdout + other.stderr
