"""tools/bench/pretrain_throughput.py at its tiny size on the CPU: every system and precision
measured with counted FLOPs and the matmul peak of the same run, uvla's step lighter than
visual_bert's (its vocabulary head runs on masked tokens only), and (slow) uvla through
mmf_run against the isolated step."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO


BENCH = REPO / "tools" / "bench" / "pretrain_throughput.py"
# A 256 x 256 matmul peak: at the CPU default (2048) a bf16 peak on a CPU without AMX takes
# minutes, and the test reads only that a peak was measured.
QUICK = [
    "--sizes",
    "tiny",
    "--precisions",
    "fp32",
    "bf16",
    "--rounds",
    "1",
    "--warmup",
    "1",
    "--threads",
    "1",
    "--matmul-size",
    "256",
]


def _bench(tmp_path: Path, *args: str) -> dict:
    out, figures = tmp_path / "bench.md", tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), *QUICK, *args, "--out", str(out), "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "| system | precision | samples/s |" in out.read_text()
    return json.loads(figures.read_text())


def _rows(figures: dict) -> dict:
    (size,) = figures["results"]
    return {(row["system"], row["precision"]): row for row in size["rows"]}, size


def test_bench_cli_at_the_tiny_size(tmp_path):
    rows, size = _rows(_bench(tmp_path))
    assert sorted(rows) == [
        ("uvla", "bf16"),
        ("uvla", "fp32"),
        ("visual_bert", "bf16"),
        ("visual_bert", "fp32"),
    ]
    assert size["size"]["batch"] == 4 and size["mmf_run"] == []
    for row in rows.values():
        assert row["samples_per_s"] > 0 and row["ms_per_step"] > 0
        assert row["peak_tflop_per_s"] > 0 and row["percent_of_peak"] > 0
        assert row["samples_per_s"] == pytest.approx(4e3 / row["ms_per_step"])
    for precision in ("fp32", "bf16"):
        assert (
            rows[("uvla", precision)]["gflop_per_step"]
            < rows[("visual_bert", precision)]["gflop_per_step"]
        )
    assert rows[("uvla", "fp32")]["gflop_per_step"] == rows[("uvla", "bf16")]["gflop_per_step"]


def test_bench_refuses_a_world_of_another_feature_dim(tmp_path):
    world = tmp_path / "world"
    world.mkdir()
    (world / "world.json").write_text(json.dumps({"config": {"feature_dim": 128}}))
    result = subprocess.run(
        [sys.executable, str(BENCH), *QUICK, "--mmf-run", f"tiny={world}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    assert f"{world}'s features are 128-d, the tiny size's 64-d" in result.stderr


def test_the_gpu_batch_probe_builds_both_models_in_a_fresh_process():
    """On a GPU the paper size's batch is probed before anything registered MMF's config,
    which the models' losses read when built; the probe itself runs on any device."""
    probe = (
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('bench', {str(BENCH)!r})\n"
        "bench = importlib.util.module_from_spec(spec)\n"
        "sys.modules['bench'] = bench\n"
        "spec.loader.exec_module(bench)\n"
        "print('fits', bench.fits(bench.SIZES['tiny'], 2, torch.device('cpu')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().endswith("fits True")


@pytest.mark.slow
def test_bench_through_mmf_run_at_the_tiny_size(tiny_corpus, tmp_path):
    holdout = [
        f"--mmf-option=dataset_config.uvla_{name}.holdout_every=6"
        for name in ("region_tag", "region_phrase", "image_sentence")
    ]
    figures = _bench(
        tmp_path,
        "--mmf-run",
        f"tiny={tiny_corpus.parent}",
        "--mmf-updates",
        "6",
        "--mmf-log-interval",
        "2",
        *holdout,
    )
    _, size = _rows(figures)
    assert [run["precision"] for run in size["mmf_run"]] == ["fp32", "bf16"]
    for run in size["mmf_run"]:
        assert len(run["intervals_ms"]) == 3 and run["ms_per_update"] > 0
        assert run["samples_per_s"] == pytest.approx(4e3 / run["ms_per_update"])


def _tool(name: str):
    import importlib.util

    sys.path.insert(0, str(REPO / "tools" / "bench"))
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_packed_run_s_start_up_and_steady_rate_and_the_study_projected_by_hand():
    packed = _tool("packed_study")
    log = (
        "2026-01-01T10:00:30 | INFO | mmf.train : progress: 20/60, train/total_loss: 1.0, "
        "time: 04s 000ms, eta: 1m\n"
        "2026-01-01T10:00:32 | INFO | mmf.train : progress: 40/60, train/total_loss: 0.9, "
        "time: 02s 000ms, eta: 1m\n"
        "2026-01-01T10:00:34 | INFO | mmf.train : progress: 60/60, train/total_loss: 0.8, "
        "time: 02s 000ms, eta: 0s\n"
    )
    from datetime import datetime

    launched = datetime(2026, 1, 1, 10, 0, 0).timestamp()
    figures = packed.run_log_figures(log, launched, 20)
    assert figures == {"startup_s": 26.0, "updates_per_s": 10.0}  # 30 s less the first 4 s
    runs = [
        {"kind": "finetune", "startup_s": 20.0, "updates_per_s": 5.0},
        {"kind": "pretrain", "startup_s": 40.0, "updates_per_s": 10.0},
        {"kind": "pretrain", "startup_s": 30.0, "updates_per_s": 20.0},
    ]
    projected = packed.projection_s(runs, 3, [2, 300, 4, 100])
    # 6 runs x 30 s start-up + 2 x 300 / 15 + 4 x 100 / 5, three at a time
    assert projected["seconds"] == pytest.approx((180 + 40 + 80) / 3)
    assert projected["startup_share"] == pytest.approx(180 / 300)


def test_a_packed_study_stopped_in_a_later_pack_keeps_the_packs_measured(tmp_path, monkeypatch):
    """The table and figures are written after each pack: a step stopped by its timeout in
    the pack of 4 (here: the pack fails) leaves the pack of 2 in --out and --json."""
    packed = _tool("packed_study")
    runs = [
        {"kind": "finetune", "startup_s": 20.0, "updates_per_s": 5.0},
        {"kind": "pretrain", "startup_s": 40.0, "updates_per_s": 10.0},
    ]

    def run_pack(size, args):
        if size > 2:
            raise RuntimeError("stopped")
        return runs

    monkeypatch.setattr(packed, "run_pack", run_pack)
    out, figures = tmp_path / "packed.md", tmp_path / "packed.json"
    command = ["--world", str(tmp_path), "--packs", "2", "4", "--out-dir", str(tmp_path)]
    with pytest.raises(RuntimeError, match="stopped"):
        packed.main([*command, "--out", str(out), "--json", str(figures)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 2 |")]
    assert rows and rows[0].split("|")[2].strip() == "30.0"  # the mean start-up
    assert [pack["runs"] for pack in json.loads(figures.read_text())["packs"]] == [2]
