"""An extraction as submitit jobs (local child processes or a Slurm array), through the corpus
builder's launcher (``mmf_uvlp.corpus.launch``): its job submission, retries and resumption.

Two phases, their logs under ``OUT/launch/<phase>/``: ``shards``, N jobs, job ``i`` extracting
shard ``i/N`` (``run.shard_range``: contiguous whole batches) into ``OUT/shards/``; and
``merge``, one job joining them into ``OUT``, byte for byte a single run's output. A shard is
done when its state says so and its files are whole, the merge when its files are as long as
the shards' together (a damaged one is done again), and an interrupted shard resumes from its
last batch, so a launch run again submits only what is left.

The launch holds ``OUT``'s lock (``run.claim``: one extraction per ``OUT``) and handles its
local jobs as the corpus launcher does: a SIGTERM or Ctrl-C stops them with it, and those
that outlived a launcher killed with SIGKILL are ended by the next launch of the same ``OUT``
before it submits anything.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Tuple

from mmf_uvlp.corpus.launch import JobLauncher, Task, sigterm_as_exit
from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.extraction.run import STATE, claim, finished, merged
from mmf_uvlp.utils.atomic import atomic_write_json
from mmf_uvlp.utils.cluster import JobOptions


def shard_job(
    make_run: Callable[..., object], out: str, shard: Tuple[int, int], threads: int
) -> Dict[str, object]:
    """Shard ``i/N``: ``make_run(out, shard)`` builds the detector and extracts."""
    import torch

    torch.set_num_threads(threads)
    return vars(make_run(out, shard))


def merge_job(shard_dirs: List[str], out: str) -> Dict[str, object]:
    from mmf_uvlp.extraction.run import merge

    return merge(shard_dirs, out)


class ExtractionLauncher(JobLauncher):
    """The corpus launcher's job handling, with the extraction's two phases."""

    job_name_prefix = "extract"

    def __init__(
        self,
        make_run: Callable[..., object],
        out: str,
        shards: int,
        options: JobOptions,
        retries: int = 2,
        progress: bool = True,
        poll_s: float = 5.0,
    ) -> None:
        super().__init__(out, shards, options, retries, progress, poll_s)
        self.make_run = make_run

    def phases(self):
        n = self.shards
        dirs = [self.shard_dir(i) for i in range(n)]
        shards = [
            Task(
                f"shard-{i}",
                f"shard {i}/{n}",
                shard_job,
                (self.make_run, dirs[i], (i, n), self.threads),
                lambda d=dirs[i]: finished(d),
            )
            for i in range(n)
        ]
        merge = [
            Task("merge", "merge", merge_job, (dirs, self.out), lambda: merged(dirs, self.out))
        ]
        return [("shards", shards), ("merge", merge)]

    def run(self) -> Dict[str, object]:
        with claim(self.out), sigterm_as_exit():
            self._check_out()
            self._end_orphans()
            for name, tasks in self.phases():
                self.run_phase(name, tasks)
        return read_json(os.path.join(self.out, "report.json"))

    def _check_out(self) -> None:
        """A launch continues only a launch of as many shards."""
        path = self.folder / "launch.json"
        have = read_json(str(path))
        if have is not None and have.get("shards") != self.shards:
            raise RuntimeError(
                f"{self.out} holds a launch of {have.get('shards')} shards; "
                "use another --out, or delete it to start again"
            )
        if os.path.exists(os.path.join(self.out, STATE)):
            raise RuntimeError(f"{self.out} holds a single run's output; launch into another --out")
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(str(path), {"shards": self.shards})
