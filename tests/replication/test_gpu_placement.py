"""`replicate --jobs N` on the GPUs present: run i on GPU i mod G (CUDA_VISIBLE_DEVICES),
several runs sharing a GPU when N > G, none placed without a GPU (GPU counts mocked)."""

import threading
import time
from collections import Counter

import pytest

from mmf_uvlp.replication.devices import GpuPlacement, visible_gpus
from mmf_uvlp.cli import replicate


def test_visible_gpus_follow_torch_and_a_scheduler_s_choice(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus(0) == []
    assert visible_gpus(2) == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert visible_gpus(2) == ["5", "7"]


def test_runs_side_by_side_spread_round_robin_over_the_gpus():
    placement = GpuPlacement(jobs=5, gpus=["0", "1"])
    assert placement.describe() == "5 runs side by side on 2 GPU(s) (GPU 0: 3, GPU 1: 2)"
    running, seen, lock = Counter(), [], threading.Lock()

    def run(command, output=None, env=None):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            running[gpu] += 1
            seen.append((command[0], gpu, dict(running)))
        time.sleep(0.2)
        with lock:
            running[gpu] -= 1
        return 0

    placed = placement.wrap(run)
    threads = [threading.Thread(target=placed, args=([f"run{i}"], f"out{i}")) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(gpu for _, gpu, _ in seen) == {"0": 3, "1": 2}
    assert max(state.get("0", 0) for _, _, state in seen) <= 3
    assert max(state.get("1", 0) for _, _, state in seen) <= 2
    assert placed(["again"]) == 0  # slots are given back


def test_replicate_places_its_runs_only_where_gpus_exist(monkeypatch, capsys):
    monkeypatch.setattr(replicate, "visible_gpus", lambda: [])
    assert replicate.placed_runs(4) is replicate.execute
    calls = []
    monkeypatch.setattr(replicate, "visible_gpus", lambda: ["0"])
    monkeypatch.setattr(
        replicate, "execute", lambda command, output=None, env=None: calls.append(env) or 0
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    run = replicate.placed_runs(3)
    assert (
        "Placement: 3 runs side by side on 1 GPU(s) (GPU 0: 3), 4 CPU threads each"
        in capsys.readouterr().out
    )
    assert run(["mmf_run"], "step.out") == 0
    assert calls[0]["CUDA_VISIBLE_DEVICES"] == "0" and calls[0]["OMP_NUM_THREADS"] == "4"


def test_placement_needs_a_gpu():
    with pytest.raises(ValueError, match="needs jobs >= 1 and a GPU"):
        GpuPlacement(2, [])
