"""An extraction as submitit jobs (local child processes or a Slurm array), through the corpus
builder's launcher (``mmf_uvlp.corpus.launch``): its job submission, retries and resumption.

Two phases, their logs under ``OUT/launch/<phase>/``: ``shards``, N jobs, job ``i`` extracting
shard ``i/N`` (``run.shard_range``: contiguous whole batches) into ``OUT/shards/``; and
``merge``, one job joining them into ``OUT``, byte for byte a single run's output. A shard is
done when its state says so, and an interrupted shard resumes from its last batch, so a launch
run again submits only what is left.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Tuple

from mmf_uvlp.corpus.launch import JobLauncher, Task
from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.utils.atomic import atomic_write_json
from mmf_uvlp.utils.cluster import JobOptions


def shard_job(make_run: Callable[..., object], out: str, shard: Tuple[int, int],
              threads: int) -> Dict[str, object]:
    """Shard ``i/N``: ``make_run(out, shard)`` builds the detector and extracts."""
    import torch

    torch.set_num_threads(threads)
    return vars(make_run(out, shard))


def merge_job(shard_dirs: List[str], out: str) -> Dict[str, object]:
    from mmf_uvlp.extraction.run import merge

    return merge(shard_dirs, out)


def _shard_done(folder: str) -> bool:
    state = read_json(os.path.join(folder, ".extract", "state.json"))
    return bool(state and state.get("complete"))


class ExtractionLauncher(JobLauncher):
    """The corpus launcher's job handling, with the extraction's two phases."""

    job_name_prefix = "extract"

    def __init__(self, make_run: Callable[..., object], out: str, shards: int,
                 options: JobOptions, retries: int = 2, progress: bool = True,
                 poll_s: float = 5.0) -> None:
        super().__init__(out, shards, options, retries, progress, poll_s)
        self.make_run = make_run

    def phases(self):
        n = self.shards
        dirs = [self.shard_dir(i) for i in range(n)]
        shards = [Task(f"shard-{i}", f"shard {i}/{n}", shard_job,
                       (self.make_run, dirs[i], (i, n), self.threads),
                       lambda d=dirs[i]: _shard_done(d)) for i in range(n)]
        merge = [Task("merge", "merge", merge_job, (dirs, self.out),
                      lambda: os.path.exists(os.path.join(self.out, "report.json")))]
        return [("shards", shards), ("merge", merge)]

    def run(self) -> Dict[str, object]:
        path = self.folder / "launch.json"
        have = read_json(str(path))
        if have is not None and have.get("shards") != self.shards:
            raise RuntimeError(f"{self.out} holds a launch of {have.get('shards')} shards; "
                               "use another --out, or delete it to start again")
        if os.path.exists(os.path.join(self.out, ".extract", "state.json")):
            raise RuntimeError(f"{self.out} holds a single run's output; launch into another "
                               "--out")
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(str(path), {"shards": self.shards})
        for name, tasks in self.phases():
            self.run_phase(name, tasks)
        return read_json(os.path.join(self.out, "report.json"))
