"""The probe's outputs: ``probe.json``, ``probe.md`` (paper Table 2 layout) and the figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from mmf_uvlp.analysis.figures import probe_figure
from mmf_uvlp.analysis.grounding import ACTIVE_SHARE


def _head(tally: Mapping) -> tuple[str, str]:
    best = tally["best_head"]
    mark = "" if best["active"] else "*"
    return f"{best['accuracy']:.1f}{mark}", f"{best['layer']}-{best['head']}"


def markdown(report: Mapping) -> str:
    """Best head per kind for each system beside the baselines."""
    systems = report["systems"]
    names = list(systems)
    first = systems[names[0]]
    kinds = ["entity"] + list(first["syntactic"])
    data = report["data"]
    lines = [
        "# Attention-grounding probe",
        "",
        f"Data: `{data['entities']}` (split {data['split'] or 'all'}: {data['images']} images, "
        f"{data['captions']} captions), regions from `{data['features']}`. "
        f"Systems: " + ", ".join(f"{n} = `{s['spec']}`" for n, s in systems.items()) + ".",
        "",
        "Accuracy (%) of the best head, `layer-head` (1-based), among heads that give on "
        f"average more than {ACTIVE_SHARE:.0%} of the sources' attention to the regions "
        "(`*`: no such head, best of all heads). A prediction is the region the source words "
        "attend to most; correct when its IoU with a gold box of the target entity is >= 0.5. "
        "Rule: the most confident region; random: a uniformly random region; upper: a region "
        "with IoU >= 0.5 exists. `entity`: the phrase's words to its own entity; a relation: "
        "the word linked by it to an entity's root word, to that entity.",
        "",
        "| Type | n | Rule | Random | Upper | "
        + " | ".join(f"{n} acc | {n} head" for n in names)
        + " |",
        "|---|---:|---:|---:|---:|" + "---:|---:|" * len(names),
    ]
    for kind in kinds:
        reference = first["entity"] if kind == "entity" else first["syntactic"][kind]
        cells = []
        for name in names:
            summary = systems[name]
            tally = summary["entity"] if kind == "entity" else summary["syntactic"].get(kind)
            cells += list(_head(tally)) if tally else ["", ""]
        lines.append(
            f"| {kind} | {reference['n']} | {reference['rule_baseline']:.1f} | "
            f"{reference['random_baseline']:.1f} | {reference['upper_bound']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    skipped = report.get("skipped") or {}
    if skipped:
        lines += ["", "Skipped: " + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) + "."]
    return "\n".join(lines) + "\n"


def write_probe_report(report: Mapping, out: Path) -> dict[str, Path]:
    """Write ``probe.json``, ``probe.md``, ``entity_grounding.png``, ``syntactic_grounding.png``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "probe.json", "markdown": out / "probe.md"}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    systems = report["systems"]
    paths["entity_figure"] = probe_figure(
        systems,
        ["entity"],
        out / "entity_grounding.png",
        "Entity grounding accuracy of each attention head",
    )
    relations = list(next(iter(systems.values()))["syntactic"])
    if relations:
        paths["syntactic_figure"] = probe_figure(
            systems,
            relations,
            out / "syntactic_grounding.png",
            "Syntactic grounding accuracy of each attention head, per dependency relation",
        )
    return paths
