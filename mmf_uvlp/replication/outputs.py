"""Gathering a study's runs into its tables, figures and ``runs.json`` (see ``render.py``),
each table with what made its runs (``provenance.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from mmf_uvlp.replication.aggregate import run_result, seed_cells, study_spread, table_rows
from mmf_uvlp.replication.provenance import table_provenance
from mmf_uvlp.replication.render import write_runs, write_table
from mmf_uvlp.replication.runner import read_record
from mmf_uvlp.replication.significance import PooledSpread
from mmf_uvlp.replication.steps import Settings, Step, plan
from mmf_uvlp.replication.study import REPO, SYSTEMS, StudyTable
from mmf_uvlp.report.trivial import trivial_rates

REFCOCO_CONFIG = REPO / "projects/uvla/finetune/refcoco_plus.yaml"


def refcoco_max_proposals(config: Path = REFCOCO_CONFIG) -> int:
    """The proposals per image RefCOCO+ fine-tuning scores (``max_features`` of its config)."""
    with open(config, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    try:
        return int(data["dataset_config"]["refcoco_plus"]["max_features"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{config}: dataset_config.refcoco_plus.max_features must be an "
            "integer (the proposals per image)"
        ) from None


def spread_of_study(settings: Settings, folder: Path, seeds: Sequence[int]) -> PooledSpread | None:
    """The seed spread of a Meta-Ave pooled over every system of the study with two seeds or
    more of ``seeds`` finished in ``folder`` (the study's archive, else its runs folder),
    whichever tables were asked for: the yardstick of the rows that have one seed."""
    every = replace(settings, runs=folder, seeds=tuple(seeds))
    cells = seed_cells(plan(list(SYSTEMS.values()), every))
    return study_spread(table_rows([(key, key) for key in SYSTEMS], seeds, cells))


def write_study(
    tables: Sequence[StudyTable],
    steps: Sequence[Step],
    settings: Settings,
    out: Path,
    header: str,
    settings_json: Mapping[str, object],
    spread: PooledSpread | None = None,
) -> list[Path]:
    """Every table's markdown and figure, and ``runs.json``, in ``out``; returns the
    markdown files in table order. ``spread``: the study's pooled seed spread
    (:func:`spread_of_study`), which a row with one seed is read against."""
    records = {step: read_record(step) for step in steps}
    results = [run_result(step, records[step]) for step in steps]
    cells = seed_cells(steps)
    trivial = {
        cell: rate
        for cell, rate in trivial_rates(settings.world.path, refcoco_max_proposals()).items()
        if cell[0] in settings.tasks
    }  # comparable with the rows' Meta-Ave
    written = []
    for table in tables:
        systems = set(table.systems())
        rows = [
            (label, system)
            for label, system in table.rows
            if any(step.system == system for step in steps)
        ]
        walls = [r.wall_s for r in results if r.step.system in systems and r.wall_s is not None]
        made = table_provenance(rows, settings.seeds, steps, records, cells)
        markdown, _ = write_table(
            table,
            table_rows(rows, settings.seeds, cells),
            settings.seeds,
            trivial,
            header,
            sum(walls) if walls else None,
            out,
            made,
            spread,
        )
        written.append(markdown)
    write_runs(results, settings_json, out / "runs.json")
    return written
