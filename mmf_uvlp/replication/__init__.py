"""The replication study of the paper's Tables 1-6 (``uvlp-replicate``, ``make replicate``).

- :mod:`~mmf_uvlp.replication.study`: the tables, their rows and the systems behind them;
- :mod:`~mmf_uvlp.replication.world`: the data (toy world or folder) and its corpora;
- :mod:`~mmf_uvlp.replication.steps`: the study as commands, each with its proof of done;
- :mod:`~mmf_uvlp.replication.runner`: running them (skip, resume, progress, wall times);
- :mod:`~mmf_uvlp.replication.children`: their processes, stopped with the runner;
- :mod:`~mmf_uvlp.replication.aggregate`: runs -> mean ± std across seeds, Meta-Ave;
- :mod:`~mmf_uvlp.replication.render`, :mod:`~mmf_uvlp.replication.outputs`: markdown,
  figures and ``runs.json``.

It builds on :mod:`mmf_uvlp.report` (run results, tables, the trivial rates of
:mod:`~mmf_uvlp.report.trivial`), which imports nothing of it.
"""
