"""Downstream results of runs in the layout of the paper's Table 1 (``uvlp-report``),
with the trivial rates of a world's test sets (:mod:`~mmf_uvlp.report.trivial`). The
replication study builds on this package; nothing here imports :mod:`mmf_uvlp.replication`."""

from mmf_uvlp.report.results import (
    RunResults,
    collect_run,
    parse_log,
    read_results_file,
)
from mmf_uvlp.report.table import MetaAverage, Row, Table, meta_average

__all__ = [
    "MetaAverage",
    "Row",
    "RunResults",
    "Table",
    "collect_run",
    "meta_average",
    "parse_log",
    "read_results_file",
]
