"""The prepared GPU check (tools/bench/gpu_check.sh) runs every step with --dry-run on a
CPU, and writes each step's status and output into its one folder."""

import os
import subprocess
import sys
import tarfile

import pytest

from helpers import REPO

STEPS = ["env", "sync", "world_study", "study", "world_paper", "paper", "packed", "data_path"]


@pytest.mark.slow
def test_the_gpu_check_dry_run_runs_every_step(tiny_corpus, tmp_path):
    worlds = tmp_path / "worlds"
    worlds.mkdir()
    for name in ("study", "paper"):  # the dry run's sizes are the tiny world's
        (worlds / name).symlink_to(tiny_corpus.parent)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    bundle = tmp_path / "back" / "gpu_check.tar.gz"
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--out", str(out),
                             "--worlds", str(worlds), "--python", sys.executable, "--dry-run",
                             "--bundle", str(bundle)],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [line.split()[0] for line in (out / "summary.txt").read_text().splitlines()]
    assert steps == STEPS
    assert all(" exit=0 " in line for line in (out / "summary.txt").read_text().splitlines())
    for produced in ("env.txt", "data_path.md", "study.md", "paper.md", "packed.txt"):
        assert (out / produced).stat().st_size > 0, produced
    assert "updates/s summed" in (out / "packed.txt").read_text()
    assert "torch" in (out / "env.txt").read_text()
    with tarfile.open(bundle) as archive:  # the one file a GPU machine hands back
        names = archive.getnames()
    assert {"./summary.txt", "./study.md", "./paper.json", "./packed.txt",
            "./packed/run_1.log"} <= set(names)
    assert not [name for name in names if name.startswith(("./worlds", "./packed/run_1/"))]


def test_a_failed_step_stops_none_after_it_and_the_bundle_holds_what_ran(tmp_path):
    """Every step fails at once (a python that exits 1): each is still run and recorded,
    and the bundle is written; a spent budget runs no step and says so."""
    bundle = tmp_path / "gpu_check.tar.gz"
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--out",
                             str(tmp_path / "out"), "--python", "false", "--dry-run",
                             "--bundle", str(bundle)],
                            capture_output=True, text=True, timeout=120)
    lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert result.returncode == 1 and [line.split()[0] for line in lines] == STEPS
    assert not [line for line in lines if " exit=0 " in line]
    with tarfile.open(bundle) as archive:
        assert {"./summary.txt", "./env.log", "./data_path.log"} <= set(archive.getnames())
    spent = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--out",
                            str(tmp_path / "spent"), "--python", "false", "--dry-run",
                            "--budget", "0"], capture_output=True, text=True, timeout=60)
    lines = (tmp_path / "spent" / "summary.txt").read_text().splitlines()
    assert spent.returncode == 1 and len(lines) == len(STEPS)
    assert all(line.endswith("not run: the budget of 0 s is spent") for line in lines)


def test_the_gpu_check_refuses_unknown_arguments():
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--bogus"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "unknown argument --bogus" in result.stderr


def test_a_carried_corpus_is_kept_and_its_world_generated_beside_it(tmp_path):
    """--worlds with a corpus alone (built elsewhere, carried): --only world_study generates
    the world around it and keeps the corpus."""
    study = tmp_path / "worlds" / "study"
    (study / "corpus" / "annotations").mkdir(parents=True)
    (study / "corpus" / "annotations" / "carried.jsonl").write_text("{}\n")
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--out",
                             str(tmp_path / "out"), "--worlds", str(tmp_path / "worlds"),
                             "--python", sys.executable, "--dry-run", "--only", "world_study"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == ["world_study"]
    assert (study / "world.json").is_file() and (study / "features").is_dir()
    assert (study / "corpus" / "annotations" / "carried.jsonl").read_text() == "{}\n"
    assert "corpus kept" in (tmp_path / "out" / "world_study.log").read_text()
