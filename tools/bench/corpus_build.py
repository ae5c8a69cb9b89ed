#!/usr/bin/env python
"""Benchmark of the corpus builder (not a test). Prints markdown tables.

1. Per-stage throughput (images/s, sentences/s) and peak RSS of a full build on a toy world
   (``tools/make_toy_world.py --preset bench``, scaled by --images / --sentences, or --world).
2. Embedding throughput of the pipeline's corpus stage as a ratio of a bare
   ``model.encode`` of the same sentences in the same process (target >= 0.9).
3. Exact (``IndexFlatIP``) vs approximate (IVF, HNSW) search on a large synthetic set of
   clustered unit vectors: search time, speed-up and recall@k against exact (target: >= 10x at
   recall >= 0.95).

    python tools/bench/corpus_build.py --images 2000 --sentences 20000 --ann-n 200000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_world(args) -> str:
    if args.world:
        return args.world
    root = os.path.join(args.out, "world")
    if not os.path.exists(os.path.join(root, "world.json")):
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "tools", "make_toy_world.py"),
                "--preset",
                "bench",
                "--seed",
                str(args.seed),
                "--out",
                root,
                "--num-images",
                str(args.images),
                "--extra-captions",
                str(max(0, args.sentences // 10)),
                "--narrative-sentences",
                str(max(0, args.sentences - args.images - args.sentences // 10)),
                "--no-progress",
            ],
            check=True,
        )
    return root


def bench_pipeline(args) -> None:
    from mmf_uvlp.corpus.config import load_config
    from mmf_uvlp.corpus.pipeline import Resources, build
    from mmf_uvlp.corpus.sentences import SentenceStore

    root = make_world(args)
    manifest = json.load(open(os.path.join(root, "world.json")))
    paths = {k: os.path.join(root, v) for k, v in manifest["paths"].items() if isinstance(v, str)}
    out = os.path.join(args.out, "build")
    if not args.reuse_build:
        shutil.rmtree(out, ignore_errors=True)
    data = {
        "inputs": {
            "predictions": paths["predictions_tsv"],
            "corpus": [paths["caption_corpus"], paths["narrative_corpus"]],
            "captions_gt": paths["captions_gt"],
            "objects_gt": paths["images_gt"],
        },
        "run": {"progress": not args.no_progress},
    }
    config = load_config(data=data, overrides=args.set)
    resources = Resources()
    t0 = time.time()
    report = build(config, out, resources=resources)
    wall = time.time() - t0
    timings = json.load(open(os.path.join(out, "timings.json")))
    print(
        f"\n### Pipeline stages ({report['inputs']['detection_rows']} images, "
        f"{report['inputs']['corpus_sentences']} sentences; wall {wall:.1f} s, "
        f"peak RSS {timings['peak_rss_mb']:.0f} MB)\n"
    )
    print("| stage | items | seconds | rate | peak RSS so far (MB) |")
    print("|---|---|---|---|---|")
    order = [
        "sentences_index",
        "sentences_embed",
        "detections",
        "queries",
        "retrieve_index_build",
        "retrieve",
        "phrases",
        "link_write",
    ]
    for name in sorted(timings["stages"], key=lambda n: order.index(n) if n in order else 99):
        t = timings["stages"][name]
        print(
            f"| {name} | {t['items']} {t['unit']} | {t['seconds']:.2f} | "
            f"{(t['rate'] or 0):.1f} {t['unit']}/s | {t['peak_rss_mb']:.0f} |"
        )
    q = report["quality"]
    print(
        f"\nquality: caption recall {json.dumps(q.get('caption_recall'))}; "
        f"link precision {json.dumps(q.get('link_precision'))}"
    )

    # embedding: the pipeline's corpus stage vs a bare encode of the same sentences, same
    # model, same process, alternated (A B A B ...) so that load from other processes on a
    # shared machine hits both alike; the best round of each is compared.
    from mmf_uvlp.corpus.embed import embed_corpus

    store = SentenceStore(os.path.join(out, "sentences"), config.inputs.corpus)
    n = min(len(store), args.embed_sentences)
    sentences = store.texts_range(0, n)
    sub = os.path.join(args.out, "embed_ab")
    shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(sub)
    with open(os.path.join(sub, "corpus.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(sentences) + "\n")
    model = resources.sentence_model(config.embed)
    bare, piped = [], []
    for round_ in range(args.embed_rounds):
        t0 = time.time()
        model.encode(
            sentences,
            batch_size=config.embed.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        bare.append(n / (time.time() - t0))
        cache = os.path.join(sub, f"cache{round_}")
        from mmf_uvlp.corpus.sentences import build_sentence_index
        from mmf_uvlp.utils.error_policy import ErrorPolicy

        t0 = time.time()
        build_sentence_index([os.path.join(sub, "corpus.txt")], cache, ErrorPolicy())
        sub_store = SentenceStore(cache, [os.path.join(sub, "corpus.txt")])
        embed_corpus(sub_store, cache, model, config.embed.chunk_size, config.embed.batch_size)
        piped.append(n / (time.time() - t0))
    print(
        f"\n### Embedding throughput ({n} corpus sentences, {args.embed_rounds} alternated "
        f"rounds; full build above: {timings['stages']['sentences_embed']['rate']:.1f}/s)\n"
    )
    print("| | sentences/s per round | best |\n|---|---|---|")
    print(
        f"| bare `model.encode` (batch {config.embed.batch_size}) | "
        f"{', '.join(f'{r:.1f}' for r in bare)} | {max(bare):.1f} |"
    )
    print(
        f"| pipeline (index + chunks + memmap) | {', '.join(f'{r:.1f}' for r in piped)} | "
        f"{max(piped):.1f} |"
    )
    print(f"| ratio (best / best) | | **{max(piped) / max(bare):.3f}** (target >= 0.9) |")


def clustered(n: int, dim: int, centers: np.ndarray, spread: float, rng) -> np.ndarray:
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100000):
        m = min(100000, n - start)
        x = centers[rng.integers(0, len(centers), m)] + spread * rng.standard_normal(
            (m, dim), dtype=np.float32
        ) / np.sqrt(dim)
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def bench_ann(args) -> None:
    import faiss

    from mmf_uvlp.corpus.config import RetrieveConfig
    from mmf_uvlp.corpus.retrieve import build_index, search

    rng = np.random.default_rng(args.seed)
    centers = rng.standard_normal((args.ann_clusters, args.ann_dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    base = clustered(args.ann_n, args.ann_dim, centers, args.ann_spread, rng)
    queries = clustered(args.ann_queries, args.ann_dim, centers, args.ann_spread, rng)
    k = args.k
    print(
        f"\n### Exact vs approximate search ({args.ann_n} x {args.ann_dim} clustered unit "
        f"vectors, {args.ann_clusters} clusters, {args.ann_queries} queries, k={k}, "
        f"{faiss.omp_get_max_threads()} threads)\n"
    )
    t0 = time.time()
    flat = build_index(base, "flat")
    t_flat_build = time.time() - t0
    t0 = time.time()
    exact_s, exact_i = search(flat, queries, k)
    t_flat = time.time() - t0
    kth = exact_s[:, -1]
    rows = [("flat (exact)", t_flat_build, t_flat, 1.0)]
    cfg = RetrieveConfig(
        ivf_nprobe=args.nprobe,
        ivf_train_size=args.ivf_train,
        hnsw_ef_search=args.ef_search,
        hnsw_m=args.hnsw_m,
        hnsw_ef_construction=args.ef_construction,
        seed=args.seed,
    )
    for kind in args.ann_kinds:
        t0 = time.time()
        index = build_index(base, kind, cfg, deterministic=False)
        t_build = time.time() - t0
        t0 = time.time()
        _, ids = search(index, queries, k)
        t_search = time.time() - t0
        hits = 0
        for i in range(len(queries)):
            got = ids[i][ids[i] >= 0]
            hits += int(np.sum(base[got] @ queries[i] >= kth[i] - 1e-5))
        rows.append(
            (
                f"{kind} ({'nprobe ' + str(args.nprobe) if kind == 'ivf' else 'efSearch ' + str(args.ef_search)})",
                t_build,
                t_search,
                hits / (len(queries) * k),
            )
        )
    print("| index | build s | search s | speed-up vs exact | recall@%d |" % k)
    print("|---|---|---|---|---|")
    for name, tb, ts, rec in rows:
        print(f"| {name} | {tb:.1f} | {ts:.3f} | {t_flat / ts:.1f}x | {rec:.4f} |")
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="/tmp/uvlp_corpus_bench")
    p.add_argument("--world", help="an existing toy world (default: generate one)")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], help="config override key=value")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--embed-sentences", type=int, default=5000)
    p.add_argument("--embed-rounds", type=int, default=3)
    p.add_argument("--skip-pipeline", action="store_true")
    p.add_argument(
        "--reuse-build",
        action="store_true",
        help="keep a finished build in OUT/build (report its timings again)",
    )
    p.add_argument("--skip-ann", action="store_true")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--ann-n", type=int, default=200000)
    p.add_argument("--ann-dim", type=int, default=384)
    p.add_argument("--ann-queries", type=int, default=2000)
    p.add_argument("--ann-clusters", type=int, default=2000)
    p.add_argument("--ann-spread", type=float, default=1.0)
    p.add_argument("--ann-kinds", nargs="+", default=["ivf", "hnsw"])
    p.add_argument("--nprobe", type=int, default=32)
    p.add_argument("--ivf-train", type=int, default=50000)
    p.add_argument("--ef-search", type=int, default=64)
    p.add_argument("--hnsw-m", type=int, default=32)
    p.add_argument("--ef-construction", type=int, default=40)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not args.skip_pipeline:
        bench_pipeline(args)
    if not args.skip_ann:
        bench_ann(args)


if __name__ == "__main__":
    main()
