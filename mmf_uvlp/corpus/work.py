"""The bookkeeping the corpus stages share: per-chunk files of the work folder and the
wall / CPU time, items and peak memory of each stage (``timings.json``)."""

from __future__ import annotations

import os
import resource
import time
from typing import Dict, Optional

import numpy as np

from mmf_uvlp.utils.atomic import atomic_open

Timings = Dict[str, Dict[str, float]]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def chunk_file(directory: str, chunk: int, extension: str) -> str:
    """The file of ``chunk`` in a stage's work ``directory``."""
    return os.path.join(directory, f"chunk-{chunk:06d}.{extension}")


def save_npy(path: str, array: np.ndarray) -> None:
    """``np.save`` to a temporary name moved into place: a file that exists is complete."""
    with atomic_open(path, "wb") as handle:
        np.save(handle, array)


def rounded(value: Optional[float], digits: int) -> Optional[float]:
    """``value`` rounded to ``digits`` (-0.0 written as 0.0), None kept."""
    if value is None:
        return None
    result = round(float(value), digits)
    return 0.0 if result == 0 else result


class Clock:
    """Wall and CPU (all threads of this process) seconds since creation."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.time(), time.process_time()

    def wall(self) -> float:
        return time.time() - self.wall0

    def cpu(self) -> float:
        return time.process_time() - self.cpu0


def add_timing(timings: Optional[Timings], name: str, clock: Clock, items: int, unit: str) -> None:
    """Add the time since ``clock`` started and ``items`` to stage ``name`` of ``timings``."""
    if timings is None:
        return
    entry = timings.setdefault(name, {"seconds": 0.0, "cpu_seconds": 0.0, "items": 0, "unit": unit})
    entry["seconds"] += clock.wall()
    entry["cpu_seconds"] += clock.cpu()
    entry["items"] += items
    entry["rate"] = entry["items"] / entry["seconds"] if entry["seconds"] > 0 else None
    entry["peak_rss_mb"] = round(peak_rss_mb(), 1)
