"""The prepared GPU check (tools/bench/gpu_check.sh) runs every step with --dry-run on a
CPU, and writes each step's status and output into its one folder."""

import os
import subprocess
import sys

import pytest

from helpers import REPO


@pytest.mark.slow
def test_the_gpu_check_dry_run_runs_every_step(tiny_corpus, tmp_path):
    worlds = tmp_path / "worlds"
    worlds.mkdir()
    for name in ("study", "paper"):  # the dry run's sizes are the tiny world's
        (worlds / name).symlink_to(tiny_corpus.parent)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--out", str(out),
                             "--worlds", str(worlds), "--python", sys.executable, "--dry-run"],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [line.split()[0] for line in (out / "summary.txt").read_text().splitlines()]
    assert steps == ["env", "worlds", "data_path", "sync", "study", "paper", "packed"]
    assert "exit=0" in (out / "summary.txt").read_text()
    for produced in ("env.txt", "data_path.md", "study.md", "paper.md", "packed.txt"):
        assert (out / produced).stat().st_size > 0, produced
    assert "updates/s summed" in (out / "packed.txt").read_text()
    assert "torch" in (out / "env.txt").read_text()


def test_the_gpu_check_refuses_unknown_arguments():
    result = subprocess.run(["bash", str(REPO / "tools/bench/gpu_check.sh"), "--bogus"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "unknown argument --bogus" in result.stderr
