"""Gather the downstream results of runs into the paper's Table 1 (markdown + bar chart).

Each ``--run`` is a folder searched for MMF ``train.log`` files and ``results.json`` files
(schema in ``mmf_uvlp/report/results.py``); one row per run, in the given order.

Examples:
    uvlp-report --run Base=runs/base --run "μ-VLA"=runs/uvla --out report/
    uvlp-report --run runs/uvla      # row named by its results.json "system"
    uvlp-report --run Base=runs/base --trivial data/toy_world_demo

Writes ``<out>/table.md`` (also printed) and ``<out>/table.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mmf_uvlp.replication.outputs import refcoco_max_proposals
from mmf_uvlp.report.trivial import trivial_rates
from mmf_uvlp.report import Table


def _run(text: str) -> tuple[str | None, str]:
    """``NAME=PATH`` or ``PATH``."""
    name, sep, path = text.partition("=")
    if not sep:
        return None, text
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH or PATH, got {text!r}")
    return name, path


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--run",
        dest="runs",
        action="append",
        type=_run,
        required=True,
        metavar="[NAME=]PATH",
        help="a run folder, optionally with its row name",
    )
    parser.add_argument("--out", default="report", help="output folder (default: report)")
    parser.add_argument(
        "--trivial",
        type=Path,
        metavar="WORLD",
        help="a data folder in the toy world's layout: add its trivial rates "
        "(majority / chance, mmf_uvlp/report/trivial.py) as a row",
    )
    args = parser.parse_args(argv)
    try:
        trivial = None
        if args.trivial is not None:
            if not args.trivial.is_dir():
                raise FileNotFoundError(f"--trivial: {args.trivial} is no folder")
            trivial = trivial_rates(args.trivial, refcoco_max_proposals())
        table = Table.from_runs(args.runs, trivial)
    except (FileNotFoundError, ValueError) as e:
        parser.exit(2, f"report: error: {e}\n")
    markdown, chart = table.write(args.out)
    print(markdown.read_text(encoding="utf-8"), end="")
    print(f"written: {markdown}, {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
