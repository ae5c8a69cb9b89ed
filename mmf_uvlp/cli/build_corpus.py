"""Build the weakly aligned image-text corpus (μ-VLA section 3.2). See docs/corpus.md.

    build_corpus.py run --predictions P.tsv [--features F.tsv] --corpus a.txt [b.txt ...] \\
        --out OUT [--shard i/N --sentence-cache CACHE] [--on-error skip] [--set key=value ...]
    build_corpus.py prepare --corpus a.txt ... --sentence-cache CACHE   # shared embeddings
    build_corpus.py merge --out MERGED SHARD_DIR [SHARD_DIR ...]
    build_corpus.py report --out OUT                                     # rewrite the report
    build_corpus.py launch --corpus ... --out OUT --shards N [--executor slurm --partition P \
        --time MIN --cpus C --mem-gb G --gpus G --array-parallelism K]  # shards as jobs

Settings: configs/corpus/default.yaml <- --config yaml <- flags <- --set overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mmf_uvlp.corpus.config import load_config
from mmf_uvlp.utils.cluster import add_job_arguments

FLAG_KEYS = {
    "predictions": "inputs.predictions",
    "features": "inputs.features",
    "detections_jsonl": "inputs.detections_jsonl",
    "captions_gt": "inputs.captions_gt",
    "objects_gt": "inputs.objects_gt",
    "hw": "inputs.hw",
    "labelmap": "inputs.labelmap",
    "k": "retrieve.k",
    "index": "retrieve.index",
    "model": "embed.model",
    "link_method": "link.method",
    "on_error": "run.on_error",
    "chunk_images": "output.chunk_images",
    "format": "output.format",
}


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="yaml overriding configs/corpus/default.yaml")
    p.add_argument("--predictions", help="VinVL predictions.tsv")
    p.add_argument("--features", help="VinVL features.tsv (validated alongside)")
    p.add_argument("--hw", help="hw.tsv: image sizes of a detector's raw predictions.tsv")
    p.add_argument("--labelmap", help="detector label map (json or tsv): classes given by id")
    p.add_argument("--detections-jsonl", dest="detections_jsonl", help="simple detections jsonl")
    p.add_argument("--corpus", nargs="+", help="text files, one sentence per line")
    p.add_argument("--captions-gt", dest="captions_gt", help="tsv image_id\\tcaption")
    p.add_argument("--objects-gt", dest="objects_gt", help="jsonl of true objects")
    p.add_argument("--k", type=int, help="sentences per image (default 5)")
    p.add_argument(
        "--index",
        choices=["auto", "flat", "ivf", "hnsw"],
        help="search index (default auto: exact up to retrieve.exact_max sentences)",
    )
    p.add_argument("--model", help="sentence-transformers folder (default: packaged MiniLM)")
    p.add_argument("--link-method", dest="link_method", choices=["glove", "sbert"])
    p.add_argument("--on-error", dest="on_error", choices=["raise", "skip"])
    p.add_argument("--chunk-images", dest="chunk_images", type=int)
    p.add_argument("--format", choices=["jsonl.gz", "jsonl"])
    p.add_argument(
        "--exclude-own-caption",
        action="store_true",
        help="drop each image's own caption (needs --captions-gt)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set retrieve.ivf_nprobe=64 (repeatable)",
    )
    p.add_argument(
        "--sentence-cache",
        dest="sentence_cache",
        help="shared sentence index + embeddings (default OUT/sentences)",
    )


def _config(args):
    overrides = []
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    if getattr(args, "corpus", None):
        overrides.append(f"inputs.corpus={json.dumps(args.corpus)}")
    if getattr(args, "exclude_own_caption", False):
        overrides.append("retrieve.exclude_own_caption=true")
    if getattr(args, "no_progress", False):
        overrides.append("run.progress=false")
    return load_config(args.config, overrides + list(args.set))


def build(argv: list[str] | None = None) -> int:
    """The subcommand of ``argv``; user errors raise."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="build (or resume) the corpus, or one shard of it")
    _add_config_flags(run)
    run.add_argument("--out", required=True, help="output directory of this run / shard")
    run.add_argument("--shard", default="0/1", help="i/N: build shard i of N (chunk c %% N == i)")
    run.add_argument(
        "--restart",
        action="store_true",
        help="discard an existing OUT's work (and a sentence cache of other inputs/settings)",
    )
    prep = sub.add_parser("prepare", help="index + embed the text corpus once (shared cache)")
    _add_config_flags(prep)
    prep.add_argument(
        "--restart", action="store_true", help="rebuild a cache of other inputs/settings"
    )
    mrg = sub.add_parser("merge", help="combine finished shard outputs")
    mrg.add_argument("--out", required=True)
    mrg.add_argument("--sentence-cache", dest="sentence_cache")
    mrg.add_argument("shards", nargs="+")
    rep = sub.add_parser("report", help="rewrite OUT/report from a finished single run")
    rep.add_argument("--out", required=True)
    lau = sub.add_parser(
        "launch",
        help="embed, build N shards and merge them as submitit jobs "
        "(Slurm job arrays or local processes)",
    )
    _add_config_flags(lau)
    lau.add_argument(
        "--out", required=True, help="merged output (shards, logs: OUT/shards, OUT/launch)"
    )
    lau.add_argument("--shards", type=int, default=1, help="jobs per array (default 1)")
    lau.add_argument(
        "--retries", type=int, default=2, help="times a failed job is submitted again (default 2)"
    )
    add_job_arguments(lau)
    args = parser.parse_args(argv)

    from mmf_uvlp.corpus import pipeline
    from mmf_uvlp.corpus.sentences import read_json

    if args.command == "run":
        config = _config(args)
        summary = pipeline.build(
            config,
            args.out,
            pipeline.parse_shard(args.shard),
            args.sentence_cache,
            restart=args.restart,
        )
        _print_summary(summary, args.out)
    elif args.command == "prepare":
        config = _config(args)
        if not args.sentence_cache:
            parser.error("prepare needs --sentence-cache")
        if not config.inputs.corpus:
            parser.error("prepare needs --corpus (or inputs.corpus in --config)")
        store = pipeline.prepare_sentences(config, args.sentence_cache, rebuild=args.restart)
        print(f"{len(store)} sentences indexed and embedded in {args.sentence_cache}")
    elif args.command == "launch":
        import logging

        from mmf_uvlp.corpus.launch import launch
        from mmf_uvlp.utils.cluster import JobOptions

        logging.basicConfig(level=logging.INFO, format="%(message)s")
        config = _config(args)
        report = launch(
            config,
            args.out,
            args.shards,
            JobOptions.from_args(args),
            args.sentence_cache,
            args.retries,
            progress=not args.no_progress,
        )
        _print_summary(report, args.out)
    elif args.command == "merge":
        summary = pipeline.merge(args.shards, args.out, sentence_cache=args.sentence_cache)
        _print_summary(summary, args.out)
    elif args.command == "report":
        import yaml

        from mmf_uvlp.corpus.config import config_from_dict
        from mmf_uvlp.corpus.report import write_report

        with open(os.path.join(args.out, "config.yaml")) as handle:
            config = config_from_dict(yaml.safe_load(handle))
        meta = read_json(os.path.join(args.out, "annotations", "index.json"))
        shared = read_json(os.path.join(args.out, "shared.json"))
        _print_summary(write_report(args.out, config, meta, shared), args.out)
    return 0


def skipped_words(summary: dict) -> str:
    """Every item the build left out, by reason and count: bad input rows skipped
    (``--on-error skip``), images without a tag after the tag filter, own captions kept out
    of retrieval (``--exclude-own-caption``); ``nothing`` when none."""

    def items(count: int, noun: str, why: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'} {why}"

    left_out = [
        items(count, "bad item", f"({reason})")
        for reason, count in summary["skipped"]["counts"].items()
        if count
    ]
    no_tags = summary.get("detections", {}).get("dropped_no_tags", 0)
    own = summary.get("retrieval", {}).get("own_caption_dropped", 0)
    if no_tags:
        left_out.append(items(no_tags, "image", "without a tag after filtering"))
    if own:
        left_out.append(items(own, "own caption", "kept out of retrieval"))
    return ", ".join(left_out) or "nothing"


def _print_summary(summary, out: str) -> None:
    if "output" in summary:
        read = summary.get("detections", {}).get("rows", summary["output"]["images"])
        print(
            f"{summary['output']['images']} of {read} images written to {out}/annotations; "
            f"skipped: {skipped_words(summary)}; report: {out}/report/report.md"
        )
    else:
        print(json.dumps(summary))


def main(argv: list[str] | None = None) -> int:
    """``build`` with user errors (bad input, bad settings) as one line, exit status 2."""
    try:
        return build(argv)
    except (ValueError, KeyError, RuntimeError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
