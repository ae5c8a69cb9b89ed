"""uvlp-extract-features where things go wrong, run as a user runs it: another tool's output
folder, two runs into one folder, a launch stopped by SIGTERM or SIGKILL, output damaged after
it was written, a full disk, a weights file that is no checkpoint, and image inputs that are
not image files. Each ends in a one-line error or a counted skip, and nothing is lost: the
output after a rerun is byte for byte an uninterrupted run's."""

import base64
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers.extraction import FAST, NO_DETECTRON2, extract_cli, write_photos

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

from mmf_uvlp.corpus.launch import launch_processes  # noqa: E402
from mmf_uvlp.extraction.run import OUTPUTS  # noqa: E402

RUN = ["--batch-size", "2", *FAST]
LAUNCH = [*RUN, "--shards", "2", "--executor", "local"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return write_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def reference(photos, tmp_path_factory):
    """One uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "raw"
    extract_cli("--images", photos, "--out", out, *RUN)
    return out


def assert_same_output(out, reference):
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def error_line(result):
    """The run's one error line; no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("extract_features: error: "), errors
    return errors[0]


def popen(*args):
    command = [sys.executable, "-m", "mmf_uvlp.cli.extract_features", *map(str, args)]
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def wait_for(condition, what, process=None, timeout=600.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        assert process is None or process.poll() is None, f"the run ended before {what}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} after {timeout} s")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end(pids):
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


# ---------------------------------------------------------------- the output folder
def vinvl_output(folder):
    """A user's own VinVL detector output, written by hand from scene_graph_benchmark's tsv
    layout: ``<key>\\t{"objects": [{"rect", "class", "conf", "attributes", "attr_scores",
    "feature" (base64 of float32)}]}`` and ``<key>\\t[{"height", "width"}]``."""
    folder.mkdir()
    feature = base64.b64encode(np.linspace(0, 1, 2048, dtype="<f4").tobytes()).decode()
    row = {
        "objects": [
            {
                "rect": [10.0, 20.0, 200.0, 180.0],
                "class": "cat",
                "conf": 0.93,
                "attributes": ["black"],
                "attr_scores": [0.61],
                "feature": feature,
            }
        ]
    }
    (folder / "predictions.tsv").write_text(f"chelsea\t{json.dumps(row)}\n")
    (folder / "hw.tsv").write_text('chelsea\t[{"height": 300, "width": 451}]\n')
    return {name: (folder / name).read_bytes() for name in ("predictions.tsv", "hw.tsv")}


def test_a_folder_holding_another_tool_s_output_is_refused_and_kept(photos, reference, tmp_path):
    out = tmp_path / "vinvl"
    before = vinvl_output(out)
    for extra in ([], ["--restart"], ["--shards", "2", "--executor", "local"]):
        line = error_line(extract_cli("--images", photos, "--out", out, *RUN, *extra, check=False))
        assert f"{out} exists and was not written by uvlp-extract-features" in line
        assert "hw.tsv, predictions.tsv" in line
    assert sorted(os.listdir(out)) == ["hw.tsv", "predictions.tsv"]
    assert {name: (out / name).read_bytes() for name in before} == before
    # uvlp-convert-features refuses the same folder the same way
    converted = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmf_uvlp.cli.convert_features",
            "--predictions",
            str(reference / "predictions.tsv"),
            "--hw",
            str(reference / "hw.tsv"),
            "--labelmap",
            str(reference / "labelmap.json"),
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
    )
    assert converted.returncode == 2
    assert f"{out} exists and was not written by convert_features" in converted.stderr


def test_a_second_extraction_into_the_same_folder_is_refused(photos, reference, tmp_path):
    out = tmp_path / "raw"
    first = popen("--images", photos, "--out", out, *RUN)
    state = out / ".extract" / "state.json"
    try:
        wait_for(
            lambda: state.exists() and json.loads(state.read_text())["next"] >= 2,
            "first batch",
            first,
        )
        first.send_signal(signal.SIGSTOP)  # holds the folder while the others try
        for extra in ([], ["--shards", "2", "--executor", "local"]):
            line = error_line(
                extract_cli("--images", photos, "--out", out, *RUN, *extra, check=False)
            )
            assert f"{out} is being written by another extraction" in line
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=600) == 0
    assert_same_output(out, reference)


# ---------------------------------------------------------------- a launch stopped
def test_a_launch_stopped_by_sigterm_stops_its_jobs(photos, reference, tmp_path):
    out = tmp_path / "launched"
    launcher = popen("--images", photos, "--out", out, *LAUNCH)
    folder = out / "launch"
    jobs = []
    try:
        wait_for(lambda: len(launch_processes(folder)) >= 2, "shard jobs", launcher)
        jobs = launch_processes(folder)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) != 0
        wait_for(lambda: not any(alive(pid) for pid in jobs), "end of the jobs", timeout=30)
    finally:
        end([pid for pid in jobs if alive(pid)])
    result = extract_cli("--images", photos, "--out", out, *LAUNCH)
    assert "2 shards merged" in result.stdout
    assert_same_output(out, reference)


def test_jobs_that_outlived_a_launch_killed_with_sigkill_are_ended_by_the_rerun(
    photos, reference, tmp_path
):
    out = tmp_path / "launched"
    launcher = popen("--images", photos, "--out", out, *LAUNCH)
    folder = out / "launch"
    orphans = []
    try:
        wait_for(lambda: len(launch_processes(folder)) >= 2, "shard jobs", launcher)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        orphans = launch_processes(folder)
        assert orphans, "the launch's jobs ended with it"
        for pid in orphans:  # still running when the rerun starts, however slow it is
            os.kill(pid, signal.SIGSTOP)
        result = extract_cli("--images", photos, "--out", out, *LAUNCH)
        assert [pid for pid in orphans if alive(pid)] == []
    finally:
        end([pid for pid in orphans if alive(pid)])
    assert "ending" in result.stderr and "outlived it" in result.stderr
    assert_same_output(out, reference)


# ---------------------------------------------------------------- damaged output
def test_a_finished_output_cut_short_is_found_and_rebuilt(photos, reference, tmp_path):
    out = tmp_path / "raw"
    shutil.copytree(reference, out)
    whole = (out / "predictions.tsv").read_bytes()
    (out / "predictions.tsv").write_bytes(whole[: len(whole) // 2])
    result = extract_cli("--images", photos, "--out", out, *RUN)
    assert f"{out / 'predictions.tsv'} has {len(whole) // 2} bytes" in result.stderr
    assert "3 of 3 images" in result.stdout and "resumed" not in result.stdout
    assert_same_output(out, reference)


def test_a_finished_launch_cut_short_is_found_and_rebuilt(photos, reference, tmp_path):
    out = tmp_path / "launched"
    extract_cli("--images", photos, "--out", out, *LAUNCH)
    merged = (out / "predictions.tsv").read_bytes()
    (out / "predictions.tsv").write_bytes(merged[:100])
    shard = out / "shards" / sorted(os.listdir(out / "shards"))[1]
    (shard / "hw.tsv").write_bytes(b"")
    result = extract_cli("--images", photos, "--out", out, *LAUNCH)
    assert f"{out / 'predictions.tsv'} has 100 bytes" in result.stderr
    assert_same_output(out, reference)
    assert json.loads((shard / ".extract" / "state.json").read_text())["complete"]


# ---------------------------------------------------------------- a full disk
FULL_DISK = """
import errno, os, sys
real = os.fsync
def fsync(fd):  # the disk fills while predictions.tsv is written
    if os.readlink(f"/proc/self/fd/{fd}").endswith("predictions.tsv"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd)
os.fsync = fsync
from mmf_uvlp.cli.extract_features import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_names_the_file_and_the_rerun_loses_nothing(photos, reference, tmp_path):
    out = tmp_path / "raw"
    full = subprocess.run(
        [sys.executable, "-c", FULL_DISK, "--images", str(photos), "--out", str(out), *RUN],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=900,
    )
    line = error_line(full)
    assert f"{out / 'predictions.tsv'}: no space left on device" in line
    assert f"[Errno {errno.ENOSPC}]" in line
    extract_cli("--images", photos, "--out", out, *RUN)
    assert_same_output(out, reference)


# ---------------------------------------------------------------- weights that are no checkpoint
def test_a_weights_file_that_is_no_checkpoint_is_refused_in_one_line(photos, tmp_path):
    import torch

    garbage = tmp_path / "model_final.pth"
    garbage.write_bytes(b"this is not a checkpoint\n" * 40)
    cut = tmp_path / "cut.pth"
    torch.save({"model": {"backbone.stem.conv1.weight": torch.zeros(64, 3, 7, 7)}}, cut)
    cut.write_bytes(cut.read_bytes()[:3000])
    fast = [a for a in RUN if a not in ("--random-weights", "0")]
    for weights in (garbage, cut):
        line = error_line(
            extract_cli(
                "--images",
                photos,
                "--out",
                tmp_path / weights.stem,
                "--weights",
                weights,
                *fast,
                check=False,
            )
        )
        assert str(weights) in line
        assert not (tmp_path / weights.stem / "predictions.tsv").exists()


# ---------------------------------------------------------------- inputs that are no image files
def test_links_to_nothing_folders_and_fifos_are_counted_skips(photos, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(photos, images)
    (images / "gone.jpg").symlink_to(tmp_path / "deleted.jpg")
    (images / "album.jpg").mkdir()
    os.mkfifo(images / "pipe.jpg")
    out = tmp_path / "raw"
    result = extract_cli("--images", images, "--out", out, *RUN, timeout=300)
    problems = {
        tuple(line.split("\t")[i] for i in (0, 2, 3))
        for line in (out / "problems.tsv").read_text().splitlines()
    }
    assert problems == {
        ("gone", "skipped", "broken_link"),
        ("album", "skipped", "not_a_file"),
        ("pipe", "skipped", "not_a_file"),
    }
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {"broken_link": 1, "not_a_file": 2}
    assert report["images_written"] == 3
    assert "skipped 3" in result.stdout


def test_a_fifo_in_a_list_file_is_a_counted_skip_not_a_hang(photos, tmp_path):
    os.mkfifo(tmp_path / "stream.png")
    listing = tmp_path / "images.txt"
    listing.write_text(f"{photos / 'coffee.png'}\nstream.png\n")
    out = tmp_path / "raw"
    result = extract_cli("--images", listing, "--out", out, *RUN, timeout=300)
    problems = [line.split("\t") for line in (out / "problems.tsv").read_text().splitlines()]
    assert [(p[0], p[2], p[3]) for p in problems] == [("stream", "skipped", "not_a_file")]
    assert "FIFO" in problems[0][4]
    assert json.loads((out / "report.json").read_text())["images_written"] == 1
    assert "skipped 1" in result.stdout
