"""The prepared GPU check's extract step, in its dry run on the CPU: the extractor's images/s
through the script as the GPU machine runs it (there: R101-C4, fp32 and fp16)."""

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)


def test_the_gpu_check_measures_the_extractor_s_images_per_second(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [
            "bash",
            str(REPO / "tools/bench/gpu_check.sh"),
            "--out",
            str(out),
            "--python",
            sys.executable,
            "--extract-python",
            sys.executable,
            "--dry-run",
            "--only",
            "extract",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == ["extract"] and " exit=0 " in summary[0]
    rates = (out / "extract.txt").read_text()
    assert re.search(
        r"^fp32: \S+/extract/fp32: 3 of 3 images, 18 regions, D = 2048; "
        r"[0-9.]+ images/s",
        rates,
        re.M,
    ), rates
