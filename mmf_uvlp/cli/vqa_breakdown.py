"""VQA accuracy per question type of fine-tuning runs, beside the per-type prior
(``mmf_uvlp.report.vqa_breakdown``).

    mmf_run config=projects/uvla/finetune/vqa2.yaml env.save_dir=save/base_vqa \\
        run_type=train_inference evaluation.predict=True ...
    uvlp-vqa-breakdown --imdb data/toy_world_demo/mmf/vqa2/annotations/imdb_test.npy \\
        --train data/toy_world_demo/mmf/vqa2/annotations/imdb_train.npy \\
        --run Base=save/base_vqa --run "Aligned VLP=save/aligned_vqa"

A ``--run`` is a save dir (its newest ``reports/vqa2*test*.json``) or a prediction file.
Prints a markdown table: one row per question type (``--by answer_type`` for yes/no,
number, other), the question count, each run's accuracy and, with ``--train``, the prior.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mmf_uvlp.analysis.systems import parse_named
from mmf_uvlp.data_formats.annotations import read_vqa2_imdb
from mmf_uvlp.report.vqa_breakdown import (
    breakdown,
    find_predictions,
    markdown,
    prior_breakdown,
    read_predictions,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--imdb", type=Path, required=True, help="the imdb of the predicted split (imdb_test.npy)"
    )
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a save dir or prediction json; repeatable",
    )
    parser.add_argument("--train", type=Path, help="the train imdb: adds the per-type prior column")
    parser.add_argument(
        "--by", default="question_type", help="the imdb field to group by (default question_type)"
    )
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    try:
        runs = parse_named(args.run, "--run", "NAME=PATH")
        if not runs:
            parser.error("give at least one --run NAME=PATH")
        questions = list(read_vqa2_imdb(args.imdb))
        columns = {}
        for name, path in runs:
            predictions = find_predictions(path)
            columns[name] = breakdown(
                questions, read_predictions(predictions), args.by, predictions
            )
        if args.train:
            columns["prior"] = prior_breakdown(
                read_vqa2_imdb(args.train), questions, args.by, args.imdb
            )
    except (ValueError, FileNotFoundError) as error:
        print(f"vqa_breakdown: error: {error}", file=sys.stderr)
        return 2
    table = markdown(columns, args.by)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
