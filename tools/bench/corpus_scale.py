#!/usr/bin/env python
"""The cost of the corpus build at Conceptual Captions scale: measured, fitted, projected.

1. ``subsets``: the first fraction ``f`` (``--fractions``) of the detection rows and of every
   corpus file of a generated world (``tools/make_toy_world.py --preset bench``).
2. ``build-<f>``: one ``tools/build_corpus.py run`` per fraction, each a fresh process with
   ``--threads`` torch / FAISS threads: per stage its seconds and items (``timings.json``), the
   peak RSS reached by the end of the stage, and the disk its folder takes; with the share of a
   CPU the build got (user + system time / wall time) and the load average seen meanwhile, so
   a measurement disturbed by other processes shows as such.
3. ``search``: exact and approximate search on the largest build's own embeddings (corpus
   sentences; tag queries of a build) at several corpus sizes (``--search-sizes``), every
   search setting of ``--nprobes`` / ``--ef-searches``: index build CPU seconds, CPU ms per
   query of the whole retrieval step (search + exact re-scoring + selection), recall@k of its
   output against the same step over an exact search.
4. ``fit``: ``CPU seconds = a * items ** b`` per stage over the fractions; per-query CPU, index
   build CPU and the share of neighbours missed against the corpus size; then the CPU hours
   per stage at ``--target-images`` x ``--target-sentences`` and the wall time on one machine
   of ``--cores`` cores, on ``--jobs`` cluster jobs and with a GPU encoder
   (``--gpu-embed-rate``, not measured here), written to ``OUT/projection.md``.

Rates are per CPU second of one thread (user + system time of the process), so that a machine
shared with other processes slows the wall time, not the figures. Every step writes
``OUT/results/<step>.json`` and is skipped when that file exists, so an interrupted benchmark
is rerun with the same command.

    python tools/make_toy_world.py --preset bench --out data/toy_bench --num-images 100000 \\
        --extra-captions 20000 --narrative-sentences 80000
    nice -n 5 python tools/bench/corpus_scale.py --world data/toy_bench \\
        --out /tmp/corpus_scale --fractions 1 0.0625 --threads 1 --set retrieve.index=ivf
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STAGE_ORDER = [
    "sentences_index",
    "sentences_embed",
    "detections",
    "queries",
    "retrieve_index_build",
    "retrieve",
    "phrases",
    "link_write",
]
WORK_FOLDERS = {
    "detections": "work/detections",
    "queries": "work/queries",
    "retrieve": "work/retrieval",
    "phrases": "work/phrases",
    "link_write": "annotations",
}


def _save(out: str, step: str, data: Dict[str, object]) -> None:
    from mmf_uvlp.utils.atomic import atomic_open

    path = os.path.join(out, "results", f"{step}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_open(path, "w", temporary=f"{path}.tmp") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)


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
    env.update(
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""),
    )
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
        return {
            "min": round(min(s), 2),
            "mean": round(float(np.mean(s)), 2),
            "max": round(max(s), 2),
            "samples": len(s),
        }


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
    sources = {
        "predictions": paths["predictions_tsv"],
        "corpus": [paths["caption_corpus"], paths["narrative_corpus"]],
    }
    totals = {
        "predictions": _count_lines(os.path.join(args.world, sources["predictions"])),
        "corpus": [_count_lines(os.path.join(args.world, p)) for p in sources["corpus"]],
    }
    subsets = {}
    for f in args.fractions:
        folder = os.path.join(args.out, f"inputs-{f:g}")
        os.makedirs(folder, exist_ok=True)
        pred = os.path.join(folder, "predictions.tsv")
        images = _head_lines(
            os.path.join(args.world, sources["predictions"]),
            pred,
            int(round(f * totals["predictions"])),
        )
        corpus, sentences = [], 0
        for src, total in zip(sources["corpus"], totals["corpus"]):
            dst = os.path.join(folder, os.path.basename(src))
            sentences += _head_lines(os.path.join(args.world, src), dst, int(round(f * total)))
            corpus.append(dst)
        subsets[f"{f:g}"] = {
            "predictions": pred,
            "corpus": corpus,
            "images": images,
            "sentences": sentences,
        }
    return {"world": os.path.abspath(args.world), "subsets": subsets}


def step_build(args, fraction: str, subset: Dict[str, object]) -> Dict[str, object]:
    out = os.path.join(args.out, f"build-{fraction}")
    cache = os.path.join(args.out, f"sentences-{fraction}")
    cmd = [
        sys.executable,
        os.path.join(REPO, "tools", "build_corpus.py"),
        "run",
        "--predictions",
        subset["predictions"],
        "--corpus",
        *subset["corpus"],
        "--out",
        out,
        "--sentence-cache",
        cache,
        "--no-progress",
        "--set",
        f"run.num_threads={args.threads}",
        *sum([["--set", s] for s in args.set], []),
    ]
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
    disk["retrieve_index_build"] = sum(
        _du(os.path.join(cache, f)) for f in os.listdir(cache) if f.startswith("faiss-")
    )
    with open(os.path.join(out, "report", "report.json")) as handle:
        report = json.load(handle)
    return {
        "command": cmd,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cpu_share": round(cpu / wall, 3) if wall else None,
        "threads": args.threads,
        "load": load.summary(),
        "images": subset["images"],
        "sentences": subset["sentences"],
        "timings": timings,
        "disk_bytes": disk,
        "retrieval": report.get("retrieval"),
        "peak_rss_mb": timings["peak_rss_mb"],
    }


def _load_queries(build_dir: str) -> np.ndarray:
    folder = os.path.join(build_dir, "work", "queries")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".npy"))
    return np.concatenate([np.load(os.path.join(folder, f)) for f in files])


def _clock():
    wall, cpu = time.time(), time.process_time()
    return lambda: (time.time() - wall, time.process_time() - cpu)


def search_point(
    embeddings: np.ndarray,
    hashes: np.ndarray,
    queries: np.ndarray,
    kind: str,
    cfg,
    k: int,
    exact: Optional[np.ndarray] = None,
    index=None,
):
    """Index build (unless ``index`` is given: then only its search settings change) and the
    retrieval step as the builder runs it (search, exact re-scoring of ``k + overfetch``
    candidates, one sentence per text) of ``queries`` over ``embeddings``; recall@k of its
    output against ``exact`` (the scores of the same step over an exact index). Returns the
    measurements, the output scores and the index."""
    from mmf_uvlp.corpus.retrieve import build_index, output_recall, retrieve, set_search_params

    lap = _clock()
    if index is None:
        index = build_index(embeddings, kind, cfg)
    else:
        set_search_params(index, kind, cfg)
    build_wall, build_cpu = lap()
    lap = _clock()
    _, scores, _ = retrieve(index, queries, embeddings, hashes, k, cfg.overfetch)
    wall, cpu = lap()
    point = {
        "kind": kind,
        "n": int(len(embeddings)),
        "queries": int(len(queries)),
        "build_wall_s": round(build_wall, 3),
        "build_cpu_s": round(build_cpu, 3),
        "retrieve_wall_s": round(wall, 3),
        "retrieve_cpu_s": round(cpu, 3),
        "cpu_ms_per_query": round(1000 * cpu / len(queries), 4),
    }
    if kind == "ivf":
        point["ivf_nprobe"], point["ivf_nlist"] = int(cfg.ivf_nprobe), int(index.nlist)
    if kind == "hnsw":
        point["hnsw_ef_search"] = int(cfg.hnsw_ef_search)
    if exact is not None:
        point[f"recall@{k}"] = round(float(output_recall(scores, exact).mean()), 4)
    return point, scores, index


def step_search(args, build_dirs: List[str], cache: str) -> Dict[str, object]:
    """Search cost and recall against the corpus size, on the build's own vectors: at each
    size the first n corpus sentences, a seeded sample of the builds' tag queries."""
    import faiss

    from mmf_uvlp.corpus.config import load_config
    from mmf_uvlp.corpus.sentences import INDEX_FILE, SENTENCE_DTYPE

    faiss.omp_set_num_threads(args.threads)
    embeddings = np.load(os.path.join(cache, "embeddings.npy"), mmap_mode="r")
    hashes = np.asarray(
        np.memmap(os.path.join(cache, INDEX_FILE), dtype=SENTENCE_DTYPE, mode="r")["hash"]
    )
    queries = _load_queries(
        next(d for d in build_dirs if os.path.exists(os.path.join(d, "annotations", "index.json")))
    )
    rng = np.random.default_rng(0)
    sample = queries[
        np.sort(
            rng.choice(len(queries), size=min(args.search_queries, len(queries)), replace=False)
        )
    ]
    base = load_config(overrides=args.set).retrieve
    points = []

    def add(point: Dict[str, object]) -> None:
        points.append(point)
        print(f"search {json.dumps(point)}", flush=True)

    with LoadSampler() as load:
        for n in args.search_sizes:
            vectors = np.ascontiguousarray(embeddings[:n])
            flat, exact, _ = search_point(vectors, hashes[:n], sample, "flat", base, args.k)
            add(flat)
            for kind, key, values in (
                ("ivf", "ivf_nprobe", args.nprobes),
                ("hnsw", "hnsw_ef_search", args.ef_searches),
            ):
                point, _, index = search_point(
                    vectors, hashes[:n], sample, kind, base, args.k, exact
                )
                add(point)
                for value in values:  # other search settings of the same index
                    cfg = load_config(overrides=args.set + [f"retrieve.{key}={value}"]).retrieve
                    add(
                        search_point(vectors, hashes[:n], sample, kind, cfg, args.k, exact, index)[
                            0
                        ]
                    )
    return {
        "points": points,
        "load": load.summary(),
        "threads": args.threads,
        "queries": int(len(sample)),
        "defaults": {
            "ivf_nprobe": base.ivf_nprobe,
            "ivf_nlist": "4 * sqrt(n)",
            "hnsw_m": base.hnsw_m,
            "hnsw_ef_search": base.hnsw_ef_search,
            "hnsw_ef_construction": base.hnsw_ef_construction,
            "overfetch": base.overfetch,
        },
    }


def power_fit(xs: List[float], ys: List[float]) -> Dict[str, float]:
    """``y = a * x ** b`` by least squares in log-log (b = 1: linear growth)."""
    lx, ly = np.log(np.asarray(xs, dtype=float)), np.log(np.asarray(ys, dtype=float))
    if len(xs) < 2:
        return {"a": float(np.exp(ly[0] - lx[0])), "b": 1.0, "points": len(xs)}
    b, log_a = np.polyfit(lx, ly, 1)
    return {"a": float(np.exp(log_a)), "b": float(b), "points": len(xs)}


def _at(fit: Dict[str, float], x: float) -> float:
    return fit["a"] * x ** fit["b"]


IMAGE_STAGES = ("detections", "queries", "link_write")
SENTENCE_STAGES = ("sentences_index", "sentences_embed")


def step_fit(
    args, builds: Dict[str, Dict[str, object]], search: Dict[str, object]
) -> Dict[str, object]:
    """Growth per stage, and the projection to the target sizes (CPU seconds of one thread;
    see the module docstring)."""
    full = builds[max(builds, key=float)]
    stages: Dict[str, Dict[str, object]] = {}
    for name in STAGE_ORDER + ["phrases"]:
        xs, ys = [], []
        for result in builds.values():
            t = result["timings"]["stages"].get(name)
            if t and t["items"] and t["cpu_seconds"] > 0:
                xs.append(t["items"])
                ys.append(t["cpu_seconds"])
        if xs:
            stages[name] = {"fit": power_fit(xs, ys), "items": xs, "cpu_s": ys}
    images, sentences = args.target_images, args.target_sentences
    parsed_per_image = (
        full["timings"]["stages"]["phrases"]["items"]
        / full["timings"]["stages"]["link_write"]["items"]
    )
    full_stages = full["timings"]["stages"]

    def grown(name: str, items: float) -> float:
        """CPU seconds at ``items``: the larger of the fitted growth and a linear
        extrapolation from the largest size (a fitted b below 1 in a stage that is linear per
        item only says that the smaller build ran on a busier machine)."""
        t = full_stages[name]
        return max(_at(stages[name]["fit"], items), t["cpu_seconds"] * items / t["items"])

    cost: Dict[str, float] = {}  # CPU seconds of one thread at the target size
    for name in SENTENCE_STAGES:
        cost[name] = grown(name, sentences)
    for name in IMAGE_STAGES:
        cost[name] = grown(name, images)
    cost["phrases"] = grown("phrases", images * parsed_per_image)
    per_item = {
        "sentences_index": sentences,
        "sentences_embed": sentences,
        "retrieve_index_build": sentences,
        "detections": images,
        "queries": images,
        "retrieve": images,
        "phrases": images,
        "link_write": images,
    }
    disk = {
        name: full["disk_bytes"][name]
        / (full["sentences"] if items == sentences else full["images"])
        * items
        for name, items in per_item.items()
    }
    # the search: per-query CPU against the corpus size, from the search step
    points = search["points"]
    kind = args.target_index

    from mmf_uvlp.corpus.config import load_config

    defaults = load_config(overrides=args.set).retrieve  # the builder's search settings

    def default_points(kind_: str) -> List[Dict[str, object]]:
        return [
            p
            for p in points
            if p["kind"] == kind_
            and (
                kind_ == "flat"
                or (kind_ == "ivf" and p["ivf_nprobe"] == defaults.ivf_nprobe)
                or (kind_ == "hnsw" and p["hnsw_ef_search"] == defaults.hnsw_ef_search)
            )
        ]

    chosen = default_points(kind)
    query_fit = power_fit([p["n"] for p in chosen], [p["cpu_ms_per_query"] for p in chosen])
    built = [p for p in points if p["kind"] == kind and p["build_cpu_s"] > 0]  # one per size
    build_fit = power_fit([p["n"] for p in built], [p["build_cpu_s"] for p in built])
    exact_fit = power_fit(
        [p["n"] for p in default_points("flat")],
        [p["cpu_ms_per_query"] for p in default_points("flat")],
    )
    chunks = math.ceil(images / 1000)
    check_queries = chunks * math.ceil(2000 / chunks)  # retrieve.recall_sample spread
    cost["retrieve"] = (
        images * _at(query_fit, sentences) / 1000 + check_queries * _at(exact_fit, sentences) / 1000
    )
    cost["retrieve_index_build"] = _at(build_fit, sentences)
    cost["exact_search_instead"] = images * _at(exact_fit, sentences) / 1000
    recall = {p["n"]: p.get(f"recall@{args.k}") for p in chosen}
    # the share missed against the corpus size, from the two largest sizes: at the smaller
    # ones it is a handful of the sampled results, too few to set a slope
    missed = [
        (p["n"], 1 - p[f"recall@{args.k}"]) for p in chosen if p.get(f"recall@{args.k}", 1) < 1
    ][-2:]
    miss_fit = power_fit([n for n, _ in missed], [m for _, m in missed]) if missed else None
    recall_at_target = 1 - _at(miss_fit, sentences) if miss_fit else 1.0
    parallel = ("detections", "queries", "retrieve", "phrases", "link_write")

    def timeline(
        jobs: int, index_cores: int, embed_rate: Optional[float] = None, gpus: int = 0
    ) -> float:
        """Wall seconds of a launch: the corpus index (one job), the embedding array, the
        search index (one job of ``index_cores``), the shard array; each job one core."""
        embed = cost["sentences_embed"] / jobs
        queries = cost["queries"] / jobs
        if embed_rate:  # the encoder on GPUs: sentences and tag queries at embed_rate each
            embed = sentences / (embed_rate * gpus)
            queries = images / (embed_rate * gpus)
        rest = sum(cost[name] for name in parallel if name != "queries") / jobs
        return (
            cost["sentences_index"]
            + embed
            + cost["retrieve_index_build"] / index_cores
            + queries
            + rest
            + 3 * args.job_start_s
        )  # embed, index, shards: job starts

    scenarios = {
        f"one {args.cores}-core machine ({args.cores} local jobs)": timeline(
            args.cores, args.cores
        ),
        f"{args.jobs} Slurm jobs of 1 core (the search-index job {args.index_cores} cores)": timeline(
            args.jobs, args.index_cores
        ),
        f"one {args.cores}-core machine with one GPU for the encoder": timeline(
            args.cores, args.cores, args.gpu_embed_rate, 1
        ),
        f"{args.jobs} Slurm jobs of 1 core and 1 GPU": timeline(
            args.jobs, args.index_cores, args.gpu_embed_rate, args.jobs
        ),
    }
    return {
        "target": {
            "images": images,
            "sentences": sentences,
            "index": kind,
            "ivf_nprobe": defaults.ivf_nprobe,
            "hnsw_ef_search": defaults.hnsw_ef_search,
        },
        "stages": stages,
        "parsed_per_image": parsed_per_image,
        "search": {
            "query_ms_fit": query_fit,
            "build_s_fit": build_fit,
            "exact_query_ms_fit": exact_fit,
            "recall_by_n": recall,
            "missed_fit": miss_fit,
            "recall_at_target": recall_at_target,
            "check_queries": check_queries,
        },
        "cost_cpu_s": cost,
        "disk_bytes_at_target": disk,
        "scenarios_h": {k: v / 3600 for k, v in scenarios.items()},
        "assumptions": {
            "gpu_embed_rate": args.gpu_embed_rate,
            "job_start_s": args.job_start_s,
            "index_cores": args.index_cores,
        },
    }


def _fmt_h(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min"


def write_markdown(
    out: str,
    builds: Dict[str, Dict[str, object]],
    search: Dict[str, object],
    fit: Dict[str, object],
    command: str,
) -> str:
    """``OUT/projection.md``: the measured tables and the projection."""
    full = builds[max(builds, key=float)]
    lines = [
        f"Command: `{command}`",
        "",
        "| fraction | images | sentences | wall | CPU share | load (1-min, min / mean / max) |"
        " peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for fraction in sorted(builds, key=float):
        b = builds[fraction]
        lines.append(
            f"| {fraction} | {b['images']:,} | {b['sentences']:,} | "
            f"{_fmt_h(b['wall_s'] / 3600)} | {b['cpu_share']:.2f} | "
            f"{b['load']['min']} / {b['load']['mean']} / {b['load']['max']} | "
            f"{b['peak_rss_mb'] / 1024:.2f} GB |"
        )
    lines += [
        "",
        f"Per stage at the largest size ({full['images']:,} images, "
        f"{full['sentences']:,} sentences), {full['threads']} thread:",
        "",
        "| stage | items | wall s | CPU s | items per CPU s | peak RSS after (GB) | disk |"
        " growth b (CPU s = a·items^b) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in STAGE_ORDER:
        t = full["timings"]["stages"].get(name)
        if not t:
            continue
        rate = t["items"] / t["cpu_seconds"] if t["cpu_seconds"] else float("nan")
        growth = fit["stages"].get(name, {}).get("fit", {}).get("b")
        lines.append(
            f"| {name} | {t['items']:,} {t['unit']} | {t['seconds']:.0f} | "
            f"{t['cpu_seconds']:.0f} | {rate:,.1f} | {t['peak_rss_mb'] / 1024:.2f} | "
            f"{full['disk_bytes'].get(name, 0) / 2**20:,.0f} MiB | "
            f"{'' if growth is None else f'{growth:.2f}'} |"
        )
    lines += [
        "",
        f"Search on the build's own vectors ({search['queries']:,} sampled tag "
        f"queries, {search['threads']} thread; load {search['load']['mean']} mean): "
        "the retrieval step as the builder runs it (search, exact re-scoring of k + "
        f"overfetch candidates, one sentence per text), recall@{fit_k(search)} of its "
        "output against the same step over an exact search.",
        "",
        "| corpus sentences | index | build CPU s | CPU ms / query | recall |",
        "|---|---|---|---|---|",
    ]
    for p in search["points"]:
        name = p["kind"] + (
            f", nlist {p['ivf_nlist']}, nprobe {p['ivf_nprobe']}"
            if p["kind"] == "ivf"
            else f", M {search['defaults']['hnsw_m']}, efSearch {p['hnsw_ef_search']}"
            if p["kind"] == "hnsw"
            else " (exact)"
        )
        recall = p.get(f"recall@{fit_k(search)}", 1.0)
        lines.append(
            f"| {p['n']:,} | {name} | {p['build_cpu_s']:.1f} | "
            f"{p['cpu_ms_per_query']:.3f} | {recall:.4f} |"
        )
    sf = fit["search"]
    t = fit["target"]
    recall_line = (
        ""
        if not sf["missed_fit"]
        else (
            f" recall@{fit_k(search)} at the target, from the share missed at the two largest "
            f"sizes (1 - recall = "
            f"{sf['missed_fit']['a']:.3g}·n^{sf['missed_fit']['b']:.2f}): "
            f"**{sf['recall_at_target']:.3f}**."
        )
    )
    setting = (
        f", efSearch {t['hnsw_ef_search']}"
        if t["index"] == "hnsw"
        else f", nprobe {t['ivf_nprobe']}"
        if t["index"] == "ivf"
        else ""
    )
    lines += [
        "",
        f"Projection to {t['images']:,} images x {t['sentences']:,} sentences "
        f"(index `{t['index']}`{setting}): per-query CPU ms = {sf['query_ms_fit']['a']:.3g}·n^"
        f"{sf['query_ms_fit']['b']:.2f}, build CPU s = {sf['build_s_fit']['a']:.3g}·n^"
        f"{sf['build_s_fit']['b']:.2f}; exact search would be "
        f"{sf['exact_query_ms_fit']['a']:.3g}·n^{sf['exact_query_ms_fit']['b']:.2f} ms "
        f"per query ({fit['cost_cpu_s']['exact_search_instead'] / 3600:,.0f} CPU hours "
        f"for the search alone).{recall_line}",
        "",
        "| stage | CPU hours at the target | disk at the target (linear per item) |",
        "|---|---|---|",
    ]
    for name, seconds in fit["cost_cpu_s"].items():
        if name != "exact_search_instead":
            lines.append(
                f"| {name} | {seconds / 3600:.2f} | "
                f"{fit['disk_bytes_at_target'].get(name, 0) / 2**30:.1f} GiB |"
            )
    lines.append(
        f"| total | {sum(v for k, v in fit['cost_cpu_s'].items() if k != 'exact_search_instead') / 3600:.2f} | "
        f"{sum(fit['disk_bytes_at_target'].values()) / 2**30:.1f} GiB |"
    )
    lines += ["", "| scenario | projected wall time |", "|---|---|"]
    for name, hours in fit["scenarios_h"].items():
        lines.append(f"| {name} | {_fmt_h(hours)} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "projection.md"), "w") as handle:
        handle.write(text)
    return text


def fit_k(search: Dict[str, object]) -> int:
    return next(int(k.split("@")[1]) for p in search["points"] for k in p if "@" in k)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--world", required=True, help="a world of make_toy_world.py")
    p.add_argument("--out", required=True)
    p.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.0625])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="corpus config override for every build (repeatable)",
    )
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--search-sizes", type=int, nargs="+", default=[12500, 50000, 200000])
    p.add_argument("--search-queries", type=int, default=2000)
    p.add_argument(
        "--search-from",
        type=float,
        help="fraction whose embedded corpus the search step uses (default: the "
        "largest of --fractions)",
    )
    p.add_argument("--nprobes", type=int, nargs="*", default=[16, 64, 128])
    p.add_argument("--ef-searches", type=int, nargs="*", default=[64, 128, 512])
    p.add_argument("--target-images", type=int, default=3_300_000)
    p.add_argument("--target-sentences", type=int, default=3_300_000)
    p.add_argument(
        "--target-index",
        default="hnsw",
        choices=["ivf", "hnsw", "flat"],
        help="the index at the target size (default hnsw: retrieve.index auto)",
    )
    p.add_argument(
        "--index-cores",
        type=int,
        default=8,
        help="cores of the search-index job in the cluster projection",
    )
    p.add_argument("--cores", type=int, default=2, help="cores of the one-machine projection")
    p.add_argument("--jobs", type=int, default=16, help="jobs of the cluster projection")
    p.add_argument(
        "--gpu-embed-rate",
        type=float,
        default=14200.0,
        help="sentences/s of the encoder on one GPU (not measured here; default: "
        "the figure sentence-transformers publishes for all-MiniLM-L6-v2 on a "
        "V100)",
    )
    p.add_argument(
        "--job-start-s",
        type=float,
        default=60.0,
        help="seconds a job takes to start and load its models",
    )
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    subsets = _load(args.out, "subsets")
    if subsets is None:
        subsets = step_subsets(args)
        _save(args.out, "subsets", subsets)
    builds = {}
    for fraction in (f"{f:g}" for f in args.fractions):  # in the order given
        subset = subsets["subsets"][fraction]
        step = f"build-{fraction}"
        if _load(args.out, step) is None:
            print(f"{step}: {subset['images']} images, {subset['sentences']} sentences", flush=True)
            result = step_build(args, fraction, subset)
            _save(args.out, step, result)
            print(
                f"{step}: {result['wall_s']} s, cpu share {result['cpu_share']}, "
                f"load {result['load']}",
                flush=True,
            )
        builds[fraction] = _load(args.out, step)
    largest = f"{args.search_from or max(args.fractions):g}"
    search = _load(args.out, "search")
    if search is None:
        search = step_search(
            args,
            [os.path.join(args.out, f"build-{f}") for f in builds],
            os.path.join(args.out, f"sentences-{largest}"),
        )
        _save(args.out, "search", search)
    fit = step_fit(args, builds, search)
    _save(args.out, "fit", fit)
    print(
        write_markdown(
            args.out,
            builds,
            search,
            fit,
            "python tools/bench/corpus_scale.py " + " ".join(argv or sys.argv[1:]),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
