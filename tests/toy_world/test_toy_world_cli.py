"""tools/make_toy_world.py: options, refusals, a killed generation, --overwrite."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from mmf_uvlp.cli import make_toy_world
from mmf_uvlp.toy_world import PRESETS
from mmf_uvlp.toy_world.vocabulary import FOREGROUND, MIN_FOREGROUND_CLASSES

from helpers import REPO
from helpers.toy_world import files_under


TOOL = REPO / "tools" / "make_toy_world.py"


# ---------------------------------------------------------------- command line


def _run_tool(capsys, *argv: str) -> tuple[int, str, str]:
    """``python tools/make_toy_world.py *argv`` in-process: its name is the program's."""
    program = sys.argv[0]
    sys.argv[0] = str(TOOL)
    try:
        code = make_toy_world.main(list(argv))
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv[0] = program
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "huge", "--out", "x"], "argument --preset: invalid choice: 'huge'"),
        (["--preset", "tiny"], "the following arguments are required: --out"),
        (
            ["--preset", "tiny", "--out", "x", "--feature-dim", "0"],
            "argument --feature-dim: expected a positive integer, got '0'",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--num-images", "many"],
            "argument --num-images: expected a positive integer, got 'many'",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--seed", "-3"],
            "argument --seed: expected a non-negative integer, got '-3'",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--downstream-scale", "nan"],
            "argument --downstream-scale: expected a positive number, got 'nan'",
        ),
        (["--preset", "tiny", "--out", "x", "--npy", "--no-npy"], "not allowed with argument"),
        (
            ["--preset", "tiny", "--out", "x", "--foreground-classes", "3"],
            f"WorldConfig.foreground_classes must be 0 (every foreground class) or from "
            f"{MIN_FOREGROUND_CLASSES} to {len(FOREGROUND)}, got 3",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--nlvr2-statements", "counts"],
            "argument --nlvr2-statements: invalid choice: 'counts'",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--foreground-classes", "8", "--nlvr2-classes", "9"],
            "WorldConfig.nlvr2_classes must be 0 (every active foreground class) or at most the 8 "
            "active foreground classes, got 9",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--nlvr2-classes", "-1"],
            "argument --nlvr2-classes: expected a non-negative integer, got '-1'",
        ),
        (
            [
                "--preset",
                "tiny",
                "--out",
                "x",
                "--nlvr2-classes",
                "4",
                "--nlvr2-classes-percent",
                "101",
            ],
            "WorldConfig.nlvr2_classes_percent must be at most 100, got 101",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--nlvr2-classes-percent", "50"],
            "WorldConfig.nlvr2_classes_percent 50 needs nlvr2_classes (the classes those pairs name), "
            "got 0",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--nlvr2-pairs", "10", "5"],
            "argument --nlvr2-pairs: expected 3 arguments",
        ),
        (
            ["--preset", "tiny", "--out", "x", "--refcoco-images", "4", "1", "-1", "1"],
            "argument --refcoco-images: expected a non-negative integer, got '-1'",
        ),
    ],
)
def test_cli_rejects_malformed_options(capsys, argv, message):
    code, _, err = _run_tool(capsys, *argv)
    assert code == 2 and message in err and "usage: make_toy_world.py" in err


def test_cli_refuses_a_foreign_non_empty_directory(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--out", str(tmp_path))
    assert code == 2 and "argument --out" in err and "not empty" in err
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--out", str(tmp_path), "--overwrite")
    assert code == 2 and "no world.json" in err and (tmp_path / "keep.txt").exists()


def test_cli_writes_a_world_and_summarises_it(capsys, tmp_path):
    out = tmp_path / "w"
    code, stdout, _ = _run_tool(
        capsys,
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--seed",
        "7",
        "--feature-dim",
        "16",
        "--no-downstream",
        "--no-progress",
        "--nlvr2-statements",
        "presence",
        "--nlvr2-classes",
        "4",
        "--nlvr2-classes-percent",
        "40",
    )
    assert code == 0
    assert "toy world 'tiny' (seed 7)" in stdout and "MiB" in stdout and " s, " in stdout
    manifest = json.loads((out / "world.json").read_text())
    assert manifest["feature_dim"] == 16 and manifest["seed"] == 7
    assert manifest["config"]["nlvr2_statements"] == "presence"
    assert manifest["config"]["nlvr2_classes"] == 4
    assert manifest["config"]["nlvr2_classes_percent"] == 40
    assert "vqa2" not in manifest["paths"]
    code, _, _ = _run_tool(
        capsys,
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--overwrite",
        "--no-downstream",
        "--no-progress",
    )
    assert code == 0


def test_cli_sets_each_downstream_split_size(capsys, tmp_path):
    out = tmp_path / "w"
    code, _, _ = _run_tool(
        capsys,
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--no-progress",
        "--nlvr2-pairs",
        "5",
        "3",
        "2",
        "--ve-hypotheses",
        "4",
        "2",
        "1",
    )
    assert code == 0
    config = json.loads((out / "world.json").read_text())["config"]
    assert config["nlvr2_pairs"] == [5, 3, 2] and config["ve_hypotheses"] == [4, 2, 1]
    assert config["vqa2_questions"] == list(PRESETS["tiny"].vqa2_questions)
    lines = {
        path.name: len(path.read_text().splitlines())
        for path in (out / "mmf").glob("*/annotations/*.jsonl")
    }
    assert lines == {
        "train.jsonl": 5,
        "dev.jsonl": 3,
        "test1.jsonl": 2,
        "snli_ve_train.jsonl": 4,
        "snli_ve_dev.jsonl": 2,
        "snli_ve_test.jsonl": 1,
    }


_KILL_SCRIPT = textwrap.dedent("""
    import os, runpy, signal, sys
    from mmf_uvlp.toy_world import generate

    def kill(*args):
        os.kill(os.getpid(), signal.SIGKILL)

    where, tool = sys.argv[1], sys.argv[2]
    if where == "generating":  # after the pre-training pool, before the downstream sets
        generate.WorldGenerator.downstream = kill
    else:  # "moving": while a replaced world's files move in (the file list, 3 files, kill)
        real, calls = os.replace, []

        def replace(src, dst):
            calls.append(dst)
            if len(calls) == 5:
                kill()
            real(src, dst)

        os.replace = replace
    sys.argv = [tool] + sys.argv[3:]
    runpy.run_path(tool, run_name="__main__")
""")


def _killed(where: str, *argv: str) -> None:
    """Run make_toy_world.py with ``argv`` and SIGKILL it at ``where``."""
    result = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, where, str(TOOL), *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]


SMALL = ("--preset", "tiny", "--no-progress", "--feature-dim", "8")
MINE = {"notes.txt": b"mine", "text/my_corpus.txt": b"mine too"}


def test_a_killed_generation_leaves_nothing_half_made(world, tmp_path, capsys):
    out = tmp_path / "w"
    _killed("generating", "--preset", "tiny", "--no-progress", "--out", str(out))
    assert not out.exists()  # the world's place is untouched
    partial = tmp_path / ".w.partial"
    assert (partial / "detections" / "cc" / "predictions.tsv").is_file()
    assert not (partial / "world.json").exists()
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--no-progress", "--out", str(out))
    assert code == 0, err
    assert not partial.exists()
    assert files_under(out) == files_under(world[0])  # the bytes of an uninterrupted run


def test_overwrite_replaces_only_the_generators_files(tmp_path, capsys):
    out, fresh = tmp_path / "w", tmp_path / "fresh"
    assert _run_tool(capsys, *SMALL, "--out", str(out))[0] == 0
    for rel, data in MINE.items():
        (out / rel).write_bytes(data)
    before = files_under(out)
    _killed("generating", *SMALL, "--seed", "3", "--out", str(out), "--overwrite")
    assert files_under(out) == before  # a killed overwrite changes nothing
    other = (*SMALL, "--seed", "3", "--no-downstream")
    assert _run_tool(capsys, *other, "--out", str(out), "--overwrite")[0] == 0
    assert _run_tool(capsys, *other, "--out", str(fresh / "a"))[0] == 0
    files = files_under(out)
    assert {rel: files.pop(rel) for rel in MINE} == MINE  # the user's files stay
    assert files == files_under(fresh / "a")  # the old world's other files are gone
    assert not (out / "mmf").exists() and not (out / "refer").exists()
    # killed while the new files move in: the list in OUT covers both worlds, a rerun ends it
    _killed("moving", *SMALL, "--out", str(out), "--overwrite")
    assert json.loads((out / "world.json").read_text())["seed"] == 3
    assert _run_tool(capsys, *SMALL, "--out", str(out), "--overwrite")[0] == 0
    assert _run_tool(capsys, *SMALL, "--out", str(fresh / "b"))[0] == 0
    files = files_under(out)
    assert {rel: files.pop(rel) for rel in MINE} == MINE
    assert files == files_under(fresh / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "w"]  # no leftovers
