#!/usr/bin/env python
"""The cost of the corpus build at Conceptual Captions scale: measured, fitted, projected.

1. ``subsets``: the first fraction ``f`` (``--fractions``) of the detection rows and of every
   corpus file of a generated world (``tools/make_toy_world.py --preset bench``).
2. ``build-<f>``: one ``tools/build_corpus.py run`` per fraction, each a fresh process with
   ``--threads`` torch / FAISS threads: per stage its seconds and items (``timings.json``), the
   peak RSS reached by the end of the stage, and the disk its folder takes; with the share of a
   CPU the build got (user + system time / wall time) and the load average seen meanwhile, so
   a measurement disturbed by other processes shows as such.
3. ``search``: exact and approximate search on the full build's own embeddings (corpus
   sentences and tag queries) at several corpus sizes: index build seconds, queries/s of the
   whole retrieval step (search + exact re-scoring + selection), recall@k against exact search.
4. ``fit``: ``seconds = a * n ** b`` per stage over the fractions (``n`` = the stage's items)
   and per index over the corpus sizes (queries/s against the corpus size), then the projection
   to ``--target-images`` x ``--target-sentences`` on one machine, on ``--jobs`` cluster jobs
   and with a GPU encoder (``--gpu-embed-rate``), written to ``OUT/projection.md``.

Every step writes ``OUT/results/<step>.json`` and is skipped when that file exists, so an
interrupted benchmark is rerun with the same command.

    nice -n 10 python tools/bench/corpus_scale.py --world data/toy_bench --out /tmp/corpus_scale \\
        --fractions 0.0625 0.25 1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

STAGE_ORDER = ["sentences_index", "sentences_embed", "detections", "queries",
               "retrieve_index_build", "retrieve", "phrases", "link_write"]
WORK_FOLDERS = {"detections": "work/detections", "queries": "work/queries",
                "retrieve": "work/retrieval", "phrases": "work/phrases",
                "link_write": "annotations"}


def _save(out: str, step: str, data: Dict[str, object]) -> None:
    path = os.path.join(out, "results", f"{step}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _load(out: str, step: str) -> Optional[Dict[str, object]]:
    path = os.path.join(out, "results", f"{step}.json")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def _du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _thread_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""))
    return env


class LoadSampler:
    """The 1-minute load average, sampled every ``every`` seconds in a thread."""

    def __init__(self, every: float = 15.0) -> None:
        self.every = every
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every)

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> Dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": round(min(s), 2), "mean": round(float(np.mean(s)), 2),
                "max": round(max(s), 2), "samples": len(s)}


def _head_lines(src: str, dst: str, count: int) -> int:
    written = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        for line in fin:
            if written >= count:
                break
            fout.write(line)
            written += 1
    return written


def _count_lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def step_subsets(args) -> Dict[str, object]:
    with open(os.path.join(args.world, "world.json")) as handle:
        paths = json.load(handle)["paths"]
    sources = {"predictions": paths["predictions_tsv"],
               "corpus": [paths["caption_corpus"], paths["narrative_corpus"]]}
    totals = {"predictions": _count_lines(os.path.join(args.world, sources["predictions"])),
              "corpus": [_count_lines(os.path.join(args.world, p)) for p in sources["corpus"]]}
    subsets = {}
    for f in args.fractions:
        folder = os.path.join(args.out, f"inputs-{f:g}")
        os.makedirs(folder, exist_ok=True)
        pred = os.path.join(folder, "predictions.tsv")
        images = _head_lines(os.path.join(args.world, sources["predictions"]), pred,
                             int(round(f * totals["predictions"])))
        corpus, sentences = [], 0
        for src, total in zip(sources["corpus"], totals["corpus"]):
            dst = os.path.join(folder, os.path.basename(src))
            sentences += _head_lines(os.path.join(args.world, src), dst, int(round(f * total)))
            corpus.append(dst)
        subsets[f"{f:g}"] = {"predictions": pred, "corpus": corpus, "images": images,
                             "sentences": sentences}
    return {"world": os.path.abspath(args.world), "subsets": subsets}


def step_build(args, fraction: str, subset: Dict[str, object]) -> Dict[str, object]:
    out = os.path.join(args.out, f"build-{fraction}")
    cache = os.path.join(args.out, f"sentences-{fraction}")
    cmd = [sys.executable, os.path.join(REPO, "tools", "build_corpus.py"), "run",
           "--predictions", subset["predictions"], "--corpus", *subset["corpus"],
           "--out", out, "--sentence-cache", cache, "--no-progress",
           "--set", f"run.num_threads={args.threads}", *sum([["--set", s] for s in args.set], [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with LoadSampler() as load:
        proc = subprocess.run(cmd, env=_thread_env(args.threads), capture_output=True, text=True)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"build {fraction} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "timings.json")) as handle:
        timings = json.load(handle)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    disk = {stage: _du(os.path.join(out, folder)) for stage, folder in WORK_FOLDERS.items()}
    disk["sentences_index"] = _du(os.path.join(cache, "index.bin"))
    disk["sentences_embed"] = _du(os.path.join(cache, "embeddings.npy"))
    disk["retrieve_index_build"] = sum(_du(os.path.join(cache, f)) for f in os.listdir(cache)
                                       if f.startswith("faiss-"))
    with open(os.path.join(out, "report", "report.json")) as handle:
        report = json.load(handle)
    return {"command": cmd, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "cpu_share": round(cpu / wall, 3) if wall else None, "threads": args.threads,
            "load": load.summary(), "images": subset["images"],
            "sentences": subset["sentences"], "timings": timings, "disk_bytes": disk,
            "retrieval": report.get("retrieval"), "peak_rss_mb": timings["peak_rss_mb"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", required=True, help="a world of make_toy_world.py")
    p.add_argument("--out", required=True)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0625, 0.25, 1.0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="corpus config override for every build (repeatable)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    subsets = _load(args.out, "subsets")
    if subsets is None:
        subsets = step_subsets(args)
        _save(args.out, "subsets", subsets)
    for fraction in (f"{f:g}" for f in args.fractions):  # in the order given
        subset = subsets["subsets"][fraction]
        step = f"build-{fraction}"
        if _load(args.out, step) is None:
            print(f"{step}: {subset['images']} images, {subset['sentences']} sentences",
                  flush=True)
            result = step_build(args, fraction, subset)
            _save(args.out, step, result)
            print(f"{step}: {result['wall_s']} s, cpu share {result['cpu_share']}, "
                  f"load {result['load']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
