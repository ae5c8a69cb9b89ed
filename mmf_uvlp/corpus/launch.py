"""A corpus build as submitit jobs: Slurm job arrays, or child processes on this computer.

    build_corpus.py launch --config corpus.yaml --out OUT --shards 16 --executor slurm \\
        --partition learnfair --time 240 --cpus 8 --mem-gb 32

Four phases, each a set of jobs whose logs are under ``OUT/launch/<phase>/``:

1. ``embed``: N jobs (one array). Job ``i`` indexes the corpus unless another job has (under
   the sentence cache's lock) and embeds the corpus chunks ``c % N == i`` into part files of
   the cache (``prepare_sentences_part``).
2. ``index``: one job. The parts into the cache's embeddings (``prepare_sentences``), then the
   search index (an approximate one is saved in the cache, read by every shard).
3. ``shards``: N jobs (one array): shard ``i/N`` of the build into ``OUT/shards/shard-i``.
4. ``merge``: one job: the shards into ``OUT``, byte for byte a single run's output.

A job is done when its output is (the part files, the cache's index, the shard's
``annotations/index.json``, the merged report; every annotation part read whole and checked
against the index, so a damaged one has its job run again), so a launch interrupted and run
again submits only the jobs left; a Slurm job still queued or running from the interrupted launch
(``OUT/launch/jobs.json``) is waited for, not submitted again. A job that fails is submitted
again, up to ``retries`` times, with its log named; the builder resumes per chunk, so a retry
continues where the failed attempt stopped. On an interrupt (SIGINT, SIGTERM) the local
executor's jobs are stopped (they are child processes); Slurm jobs keep running. Local jobs
that outlived a launcher killed with SIGKILL are ended by the next launch of the same
``OUT`` before it submits anything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from mmf_uvlp.corpus.config import CorpusConfig
from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.utils.atomic import atomic_write_json
from mmf_uvlp.utils.cluster import JobOptions

logger = logging.getLogger(__name__)

PHASES = ("embed", "index", "shards", "merge")
ACTIVE_SLURM_STATES = (
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
)


# ---------------------------------------------------------------------- the jobs (run remotely)
def _in_job(config: CorpusConfig, threads: int) -> CorpusConfig:
    """The config a job runs: no progress bars in its log, its thread count
    (``run.num_threads`` unless set; no fingerprint covers ``run.*``)."""
    return replace(
        config,
        run=replace(config.run, progress=False, num_threads=config.run.num_threads or int(threads)),
    )


def _set_threads(config: CorpusConfig, threads: int) -> None:
    """``run.num_threads`` when set, else the job's share of the cores: the thread count
    sums floats in its own order, so a job embeds like a single run with as many threads."""
    import faiss
    import torch

    count = int(config.run.num_threads or threads)
    torch.set_num_threads(count)
    faiss.omp_set_num_threads(count)


def embed_job(config: CorpusConfig, cache: str, part: Tuple[int, int], threads: int) -> int:
    """Phase 1: the corpus chunks ``c % N == i`` into part files of the sentence cache."""
    from mmf_uvlp.corpus.pipeline import prepare_sentences_part

    _set_threads(config, threads)
    return prepare_sentences_part(config, cache, part)


def index_job(config: CorpusConfig, cache: str, threads: int) -> int:
    """Phase 2: the parts into the cache's embeddings, then the search index."""
    from mmf_uvlp.corpus.pipeline import prepare_index, prepare_sentences

    _set_threads(config, threads)
    store = prepare_sentences(config, cache, progress=False)
    prepare_index(config, cache)
    return len(store)


def shard_job(
    config: CorpusConfig, out: str, shard: Tuple[int, int], cache: str, threads: int
) -> Dict[str, object]:
    """Phase 3: shard ``i/N`` of the build."""
    from mmf_uvlp.corpus.pipeline import build

    return build(_in_job(config, threads), out, shard, cache)


def merge_job(shard_dirs: Sequence[str], out: str, cache: str) -> Dict[str, object]:
    """Phase 4: the shards into ``out``."""
    from mmf_uvlp.corpus.pipeline import merge

    summary = merge(shard_dirs, out, sentence_cache=cache)
    return {"images": summary["output"]["images"]} if "output" in summary else summary


# ---------------------------------------------------------------------- what is done
def embed_part_done(config: CorpusConfig, cache: str, part: Tuple[int, int]) -> bool:
    """Every chunk of part ``i/N`` embedded (or the whole cache assembled)."""
    from mmf_uvlp.corpus.embed import DONE_FILE, PROGRESS_FILE, part_file

    if os.path.exists(os.path.join(cache, DONE_FILE)):
        return True
    meta = read_json(os.path.join(cache, "meta.json"))
    if meta is None or meta.get("fingerprint") != config.sentence_fingerprint():
        return False
    n = int(meta["counts"]["sentences"])
    size = config.embed.chunk_size
    done = set(read_json(os.path.join(cache, PROGRESS_FILE), {"done": []})["done"])
    return all(
        c in done or os.path.exists(part_file(cache, c))
        for c in range(part[0], (n + size - 1) // size, part[1])
    )


def index_done(config: CorpusConfig, cache: str) -> bool:
    """The corpus embedded and its approximate index (if any) saved."""
    import numpy as np

    from mmf_uvlp.corpus.embed import DONE_FILE, EMBEDDINGS_FILE
    from mmf_uvlp.corpus.retrieve import index_path, resolve_index_kind

    if not os.path.exists(os.path.join(cache, DONE_FILE)):
        return False
    n, dim = np.load(os.path.join(cache, EMBEDDINGS_FILE), mmap_mode="r").shape
    cfg = config.retrieve
    path = index_path(
        resolve_index_kind(cfg.index, n, cfg.exact_max),
        cfg,
        n,
        dim,
        cache,
        config.run.deterministic_hnsw,
    )
    return path is None or os.path.exists(path)


def _complete(out: str) -> bool:
    """The annotations of ``out`` are whole as its index lists them; a damaged part is told
    (its job runs again and rewrites it)."""
    from mmf_uvlp.corpus.shards import output_damage

    damage = output_damage(out)
    if damage is not None:
        logger.warning("%s; its job is run again", damage)
    return damage is None


def _read_index(out: str) -> Optional[Dict[str, object]]:
    try:
        return read_json(os.path.join(out, "annotations", "index.json"))
    except ValueError:  # a damaged index: the job that writes it runs again
        return None


def shard_done(config: CorpusConfig, out: str, shard: Tuple[int, int]) -> bool:
    state = read_json(os.path.join(out, "state.json"))
    return (
        state is not None
        and state.get("fingerprint") == config.shard_fingerprint()
        and state.get("shard") == list(shard)
        and _read_index(out) is not None
        and os.path.exists(os.path.join(out, "shared.json"))
        and _complete(out)
    )


def merge_done(config: CorpusConfig, out: str) -> bool:
    index = _read_index(out)
    return (
        index is not None
        and index.get("complete") is True
        and "shard" not in index
        and index.get("fingerprint") == config.shard_fingerprint()
        and os.path.exists(os.path.join(out, "report", "report.json"))
        and _complete(out)
    )


# ---------------------------------------------------------------------- local processes
def launch_processes(folder: Path) -> List[int]:
    """The processes of this computer (but this one) running local jobs of the launch whose
    logs are under ``folder``: submitit's job controllers and tasks, whose command lines
    name a folder in it (read from ``/proc``; none found where there is no ``/proc``)."""
    prefix = os.path.join(str(folder), "").encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                args = handle.read().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        if any(b"submitit" in arg for arg in args) and any(arg.startswith(prefix) for arg in args):
            found.append(int(entry))
    return found


def end_processes(pids: Sequence[int], grace_s: float = 5.0) -> None:
    """SIGTERM to ``pids``, then SIGKILL to those still running after ``grace_s`` seconds."""
    import signal

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while time.time() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.1)
        pids = [pid for pid in pids if alive(pid)]
        if not pids:
            return


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit in the main thread, so the launch stops its local jobs as it
    does on Ctrl-C (SIGINT)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------- submitting and waiting
@dataclass
class Task:
    """One job of a phase: what it runs and the output that proves it done."""

    key: str
    label: str
    fn: Callable
    args: tuple
    done: Callable[[], bool]


def submit(executor, tasks: Sequence[Task]) -> list:
    """Submit ``tasks`` (of one function) as one job array on Slurm (separate processes on
    the local executor); returns their jobs in order."""
    if len(tasks) == 1:
        return [executor.submit(tasks[0].fn, *tasks[0].args)]
    jobs = []
    with executor.batch():
        for task in tasks:
            jobs.append(executor.submit(task.fn, *task.args))
    return jobs


def _failure(job) -> Optional[str]:
    """None when the job returned, else what went wrong in one line: the last line of the
    job's traceback, or that it ended without a result (killed, out of time or memory)."""
    try:
        job.result()
    except Exception as exc:  # submitit's FailedJobError / UncompletedJobError
        text = str(exc)
        if type(exc).__name__ == "UncompletedJobError":
            state = re.search(r"\(state: ([^)]*)\)", text)
            return (
                "the job ended without a result (state "
                f"{state.group(1) if state else 'unknown'}: it exited, was killed or ran "
                "out of time or memory)"
            )
        lines = [
            line.strip()
            for line in text.split("You can check full logs")[0].splitlines()
            if line.strip() and not set(line.strip()) <= {"-"}
        ]
        return lines[-1] if lines else type(exc).__name__
    return None


def _log_of(job) -> str:
    """The job's error log when it holds something, else its output log."""
    stderr = Path(job.paths.stderr)
    return str(stderr if stderr.exists() and stderr.stat().st_size else job.paths.stdout)


class JobLauncher:
    """Submission, retries and resumption of a launch's jobs, phase by phase: a subclass
    names its phases (``phases``) and runs them (``run``)."""

    job_name_prefix = "jobs"  # the jobs' names: <prefix>-<phase>

    def __init__(
        self,
        out: str,
        shards: int,
        options: JobOptions,
        retries: int = 2,
        progress: bool = True,
        poll_s: float = 5.0,
    ) -> None:
        if shards < 1:
            raise ValueError(f"--shards: expected N >= 1, got {shards}")
        if retries < 0:
            raise ValueError(f"--retries: expected >= 0, got {retries}")
        self.out = os.path.abspath(out)
        self.shards = shards
        self.options = options
        self.retries = retries
        self.progress = progress
        self.poll_s = poll_s
        self.folder = Path(self.out) / "launch"
        self.jobs_file = self.folder / "jobs.json"
        parallel = options.parallelism() or shards
        self.threads = options.threads(min(parallel, shards))

    # ---------------------------------------------------------------- shards
    def shard_dir(self, i: int) -> str:
        return os.path.join(self.out, "shards", f"shard-{i:04d}-of-{self.shards:04d}")

    def _end_orphans(self) -> None:
        """Local jobs of an earlier launch of this ``OUT`` that outlived it (its launcher was
        killed with SIGKILL) are ended before anything is submitted."""
        if self.options.executor != "local":
            return
        orphans = launch_processes(self.folder)
        if orphans:
            logger.warning(
                "ending %d processes of an earlier launch of %s that outlived it (pids %s)",
                len(orphans),
                self.out,
                ", ".join(map(str, sorted(orphans))),
            )
            end_processes(orphans)

    def _stop_local_jobs(self, jobs: Sequence[object]) -> None:
        """Stop the running local jobs: cancelled (SIGINT), then what is left of them ended."""
        for job in jobs:
            job.cancel(check=False)
        deadline = time.time() + 10.0
        while time.time() < deadline and not all(job.done() for job in jobs):
            time.sleep(0.1)
        left = launch_processes(self.folder)
        if left:
            end_processes(left)

    # ---------------------------------------------------------------- one phase
    def _recorded(self) -> Dict[str, Dict[str, str]]:
        return read_json(str(self.jobs_file), {})

    def _record(self, phase: str, key: str, job_id: str) -> None:
        jobs = self._recorded()
        jobs.setdefault(phase, {})[key] = str(job_id)
        atomic_write_json(str(self.jobs_file), jobs)

    def _reattach(self, phase: str, task: Task):
        """A Slurm job of an interrupted launch still queued or running for ``task``."""
        if self.options.executor != "slurm":
            return None
        job_id = self._recorded().get(phase, {}).get(task.key)
        if not job_id:
            return None
        import submitit

        job = submitit.SlurmJob(folder=self.folder / phase, job_id=job_id)
        return job if job.state in ACTIVE_SLURM_STATES else None

    def run_phase(self, phase: str, tasks: Sequence[Task]) -> None:
        from tqdm import tqdm

        todo = [task for task in tasks if not task.done()]
        if not todo:
            logger.info("%s: %d of %d jobs already done", phase, len(tasks), len(tasks))
            return
        executor = self.options.executor_for(self.folder / phase, f"{self.job_name_prefix}-{phase}")
        limit = self.options.parallelism()
        attempts = {task.key: 0 for task in todo}
        running: Dict[object, Task] = {}
        queue: List[Task] = []
        for task in todo:
            job = self._reattach(phase, task)
            if job is not None:
                logger.info(
                    "%s: waiting for job %s of the interrupted launch", task.label, job.job_id
                )
                attempts[task.key] = 1
                running[job] = task
            else:
                queue.append(task)
        failures: List[str] = []
        bar = tqdm(
            total=len(tasks),
            initial=len(tasks) - len(todo),
            desc=phase,
            unit="job",
            disable=not self.progress,
            dynamic_ncols=True,
        )
        try:
            while queue or running:
                free = len(queue) if limit is None else max(0, limit - len(running))
                batch, queue = queue[:free], queue[free:]
                if batch:
                    for task, job in zip(batch, submit(executor, batch)):
                        attempts[task.key] += 1
                        running[job] = task
                        self._record(phase, task.key, job.job_id)
                        logger.info(
                            "%s: job %s (attempt %d), log %s",
                            task.label,
                            job.job_id,
                            attempts[task.key],
                            job.paths.stdout,
                        )
                finished = [job for job in running if job.done()]
                if not finished:
                    time.sleep(self.poll_s)
                    continue
                for job in finished:
                    task = running.pop(job)
                    error = _failure(job)
                    if error is None and task.done():
                        bar.update(1)
                        continue
                    error = error or "the job ended without error but its output is missing"
                    tries = attempts[task.key]
                    if tries <= self.retries:
                        logger.warning(
                            "%s failed (attempt %d of %d): %s; log %s; submitted again",
                            task.label,
                            tries,
                            self.retries + 1,
                            error,
                            _log_of(job),
                        )
                        queue.append(task)
                    else:
                        failures.append(
                            f"{task.label} failed {tries} times; last log {_log_of(job)}: {error}"
                        )
                bar.set_postfix(
                    running=len(running), retried=sum(max(0, a - 1) for a in attempts.values())
                )
        except BaseException:
            if self.options.executor == "local":
                self._stop_local_jobs(list(running))
            raise
        finally:
            bar.close()
        if failures:
            raise RuntimeError(
                f"{phase}: "
                + "; ".join(failures)
                + "; fix the cause and run the launch again to resume"
            )


class Launcher(JobLauncher):
    """Run the phases of a corpus launch; see the module docstring."""

    job_name_prefix = "corpus"

    def __init__(
        self,
        config: CorpusConfig,
        out: str,
        shards: int,
        options: JobOptions,
        sentence_cache: Optional[str] = None,
        retries: int = 2,
        progress: bool = True,
        poll_s: float = 5.0,
    ) -> None:
        super().__init__(out, shards, options, retries, progress, poll_s)
        self.config = config.validate()
        self.cache = os.path.abspath(sentence_cache or os.path.join(self.out, "sentences"))

    # ---------------------------------------------------------------- phases
    def phases(self) -> List[Tuple[str, List[Task]]]:
        n, cfg, cache = self.shards, self.config, self.cache
        embed = [
            Task(
                f"embed-{i}",
                f"embedding part {i}/{n}",
                embed_job,
                (cfg, cache, (i, n), self.threads),
                lambda i=i: embed_part_done(cfg, cache, (i, n)),
            )
            for i in range(n)
        ]
        index_threads = self.options.cpus or (
            max(1, os.cpu_count() or 1) if self.options.executor == "local" else 1
        )
        index = [
            Task(
                "index",
                "embeddings + search index",
                index_job,
                (cfg, cache, index_threads),
                lambda: index_done(cfg, cache),
            )
        ]
        shards = [
            Task(
                f"shard-{i}",
                f"shard {i}/{n}",
                shard_job,
                (cfg, self.shard_dir(i), (i, n), cache, self.threads),
                lambda i=i: shard_done(cfg, self.shard_dir(i), (i, n)),
            )
            for i in range(n)
        ]
        merge = [
            Task(
                "merge",
                "merge",
                merge_job,
                ([self.shard_dir(i) for i in range(n)], self.out, cache),
                lambda: merge_done(cfg, self.out),
            )
        ]
        return [("embed", embed), ("index", index), ("shards", shards), ("merge", merge)]

    def run(self) -> Dict[str, object]:
        with sigterm_as_exit():
            self._end_orphans()
            self._check_out()
            for name, tasks in self.phases():
                self.run_phase(name, tasks)
        return read_json(os.path.join(self.out, "report", "report.json"))

    def _check_out(self) -> None:
        """A launch continues only a launch of the same config and shard count."""
        path = self.folder / "launch.json"
        want = {
            "fingerprint": self.config.shard_fingerprint(),
            "shards": self.shards,
            "sentence_cache": self.cache,
        }
        have = read_json(str(path))
        if have is not None and {k: have.get(k) for k in want} != want:
            raise RuntimeError(
                f"{self.out} holds a launch of another config or shard count ({path}: "
                f"{have}); use another --out, or delete it to start again"
            )
        if os.path.exists(os.path.join(self.out, "state.json")):
            raise RuntimeError(
                f"{self.out} holds a single run's output (state.json); launch into another --out"
            )
        meta = read_json(os.path.join(self.cache, "meta.json"))
        if meta is not None and meta.get("fingerprint") != self.config.sentence_fingerprint():
            raise RuntimeError(
                f"{self.cache} holds sentences of other inputs/settings; use another "
                "--sentence-cache, or rebuild it with `build_corpus.py prepare --restart`"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(str(path), want)


def launch(
    config: CorpusConfig,
    out: str,
    shards: int,
    options: Optional[JobOptions] = None,
    sentence_cache: Optional[str] = None,
    retries: int = 2,
    progress: bool = True,
    poll_s: float = 5.0,
) -> Dict[str, object]:
    """Build the corpus as ``shards`` jobs and merge them into ``out``; returns the report."""
    return Launcher(
        config, out, shards, options or JobOptions(), sentence_cache, retries, progress, poll_s
    ).run()
