"""The numbers quoted in the calibrated world's paragraph, and what docs/calibration.md and
docs/replication.md take from the archives, against the committed archive (how:
``helpers/readings.py``)."""

from __future__ import annotations

import math
import re
import statistics

import pytest

from mmf_uvlp.report.results import LOG_FILE, collect_run, parse_log

from helpers import REPO
from helpers.readings import (
    ARCHIVE,
    Quote,
    RESULTS,
    Readings,
    SEEDS,
    backfilled,
    f,
    normal,
    option,
    paired,
    pooled_sd,
    preset,
    problems,
    records,
    row_stat,
    run_minutes,
    world,
)


WORLD: list[Quote] = [
    lambda: (
        f"{world('num_images'):,} pre-training images captioned by object lists over "
        f"{world('foreground_classes')} classes; fine-tuning sets of "
        f"{world('vqa2_questions')[0]:,} VQA questions, {preset('nlvr2_pairs')[0]:,} NLVR2 "
        f"pairs (half of them about {preset('nlvr2_classes')} frequent classes) and "
        f"{preset('ve_hypotheses')[0]:,} VE hypotheses; "
        f"{int(option('pretrain', 'training.max_updates')):,} pre-training and "
        f"{int(option('vqa2', 'training.max_updates')):,} fine-tuning updates"
    ),
    lambda: (
        f"The {len(backfilled())} runs of Base, Random pairs' seeds 0 and 1, μ-VLA and "
        f"Aligned VLP took {sum(r['wall_s'] for r in backfilled()) / 3600:.1f} h, summed"
    ),
    lambda: "given afterwards what their logs establish (torch {}, {})".format(
        *({r[key] for r in backfilled()}.pop() for key in ("torch", "precision"))
    ),
    lambda: "Random pairs' seed 2 name theirs: {} commits".format(
        {0: "no", 9: "nine"}.get(
            n := len(
                {
                    r["commit"]
                    for r in records()
                    if (
                        "U-VisualBERT" in r["title"]
                        or r["title"].startswith(
                            (
                                "pre-train Random pairs, seed 2",
                                "fine-tune Random pairs, seed 2",
                                "RefCOCO+ val/testA/testB of Random pairs, seed 2",
                            )
                        )
                    )
                    and "(" not in r["title"]
                }
            ),
            str(n),
        )
    ),
]


def pooled_interval() -> float:
    """Half the 95 % interval of one seed against three with the pooled spread, in points."""
    from scipy import stats

    sd, df, _ = pooled_sd()
    return float(stats.t.ppf(0.975, df) * sd * math.sqrt(1 + 1 / 3))


WORLD += [
    lambda: (
        "pooled over the study's {2} rows with three seeds is {0:.2f} points on {1} degrees "
        "of freedom".format(*pooled_sd())
    ),
    lambda: f"read with a 95 % interval of ± {pooled_interval():.1f} points",
    lambda: f"(those of the {len(backfilled())} runs above among them)",
]

WORLD_ELSEWHERE = [
    "on a 2-core x86 CPU",  # the machine of the unrecorded runs (their logs: a CPU build)
    "Table 6's rows beyond 0 % as they are made (its 0 % row",  # the rows' configs (paired_ratio)
]


CALIBRATION = REPO / "docs" / "calibration.md"


NLVR2_24, NLVR2_6 = (
    REPO / "results" / "archive" / f"calibrated_nlvr2_{n}_classes" for n in (24, 6)
)


SEARCH = REPO / "results" / "archive" / "calibrated_nlvr2_mix_search"


def nlvr2(archive, system: str) -> list[float]:
    """The NLVR2 test accuracy (points) of each seed of ``system`` in another archive."""
    return [
        100 * collect_run(folder).cells["nlvr2", "test"]
        for folder in sorted((archive / system).glob("seed*/nlvr2"))
    ]


def stat(values: list[float]) -> str:
    return f"{f(statistics.fmean(values))} ± {f(statistics.stdev(values))}"


def half_up(text: str) -> str:
    """A logged fraction (``0.4645``) in points to one decimal, halves up (``46.5``)."""
    from decimal import ROUND_HALF_UP, Decimal

    return str((Decimal(text) * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def subset(run: str) -> str:
    """A search run's test accuracy on a subset of the NLVR2 test pairs (``subsets.txt``)."""
    text = (SEARCH / "subsets.txt").read_text(encoding="utf-8")
    return half_up(re.search(rf"^{run} test/nlvr2/accuracy: ([0-9.]+)$", text, re.M).group(1))


def search_val(run: str) -> str:
    return f(100 * parse_log(SEARCH / run / LOG_FILE)["val/nlvr2/accuracy"])


CALIBRATION_QUOTES: list[Quote] = [
    lambda: "without it μ-VLA reads {} Meta-Ave higher over three seeds".format(
        f(-paired("uvla", "no_witm")[0])
    ),
    lambda: (
        f"| **6,000 presence pairs, half about 4 classes** | **{row_stat('base', 'nlvr2')} "
        f"(majority 52.9)** | **{row_stat('aligned_vlp', 'nlvr2')}** |"
    ),
    lambda: (
        f"| 6,000 presence pairs, all 24 classes | {stat(nlvr2(NLVR2_24, 'base'))} "
        f"(majority 51.1) | {stat(nlvr2(NLVR2_24, 'aligned_vlp'))} |"
    ),
    lambda: "| 6,000 presence pairs over 6 classes | {} (solved) | {} |".format(
        " / ".join(map(f, nlvr2(NLVR2_6, "base"))),
        " / ".join(map(f, nlvr2(NLVR2_6, "aligned_vlp"))),
    ),
    lambda: (
        f"It gave Base {search_val('base_seed0')} / {search_val('base_seed1')} and "
        f"Aligned VLP {search_val('aligned_vlp_seed0')}"
    ),
    lambda: (
        "Base learns the 4-class pairs partly ({:.0f}–{:.0f} % test) and the others not at "
        "all ({} / {}); Aligned VLP reads both ({} / {})".format(
            *sorted(float(subset(f"base_{k}_named")) for k in (0, 1)),
            subset("base_0_other"),
            subset("base_1_other"),
            subset("aligned_vlp_0_named"),
            subset("aligned_vlp_0_other"),
        )
    ),
]


REPLICATION = REPO / "docs" / "replication.md"


REPLICATION_QUOTES: list[Quote] = [
    lambda: "μ-VLA (R-N): pre-training {:.0f} min, VQA {:.1f} min, NLVR2 {:.1f}, VE {:.1f}".format(
        *(run_minutes("rn", 0, run) for run in ("pretrain", "vqa2", "nlvr2", "visual_entailment"))
    ),
    lambda: (
        "| calibrated recipe, Table 1's Base, μ-VLA and Aligned VLP × 3 seeds | 6 "
        "pre-trainings, 36 fine-tunings, 9 split inferences | {:.1f} h of runs |".format(
            sum(
                run_minutes(system, k, path.parent.name)
                for system in ("base", "uvla", "aligned_vlp")
                for k in SEEDS
                for path in (ARCHIVE / system / f"seed{k}").glob("*/step.json")
            )
            / 60
        )
    ),
]


def calibration_problems(text: str, page=None, quotes=None) -> list[str]:
    """The quotes of ``quotes`` (:data:`CALIBRATION_QUOTES`) missing from ``text``."""
    page, quotes = page or CALIBRATION, quotes or CALIBRATION_QUOTES
    text = normal(text)
    return [
        f"{page.name}: the archive gives {normal(quote())!r}, not on the page"
        for quote in quotes
        if normal(quote()) not in text
    ]


def test_the_archive_s_numbers_in_replication_md_are_the_archive_s():
    text = REPLICATION.read_text(encoding="utf-8")
    found = calibration_problems(text, REPLICATION, REPLICATION_QUOTES)
    assert not found, "\n".join(found)
    assert calibration_problems(
        text.replace("25.7 h of runs", "27.5 h of runs"), REPLICATION, REPLICATION_QUOTES
    )


def test_the_archive_s_numbers_in_calibration_md_are_the_archive_s():
    found = calibration_problems(CALIBRATION.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)
    changed = CALIBRATION.read_text(encoding="utf-8").replace("(46.5 / 48.0)", "(46.5 / 49.0)")
    assert calibration_problems(changed)


READINGS: Readings = {"The calibrated world": (WORLD, WORLD_ELSEWHERE)}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        ("is 1.88 points on 24", "is 1.86 points on 24"),  # the pooled spread
        ("interval of ± 4.5 points", "interval of ± 4.3 points"),  # one seed against three
        ("took 29.3 h", "took 28.3 h"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)


MASK_CHANGE = ("85af731", "4cdbb5c")  # the commits from which a sample's masks follow its position


def pretrained_after_the_change() -> set[tuple[str, int]]:
    """(system, seed) of the archived pre-trainings whose code has both commits of
    :data:`MASK_CHANGE` (a record naming no commit was made by the code of c0761a7, before)."""
    import json
    import subprocess

    after = set()
    for path in ARCHIVE.glob("*/seed*/pretrain/step.json"):
        commit = json.loads(path.read_text(encoding="utf-8")).get("commit", "unknown")
        if commit != "unknown" and all(
            subprocess.run(
                ["git", "-C", str(REPO), "merge-base", "--is-ancestor", change, commit],
                capture_output=True,
            ).returncode
            == 0
            for change in MASK_CHANGE
        ):
            after.add((path.parents[2].name, int(path.parents[1].name.removeprefix("seed"))))
    return after


def test_the_two_mask_streams_are_those_the_page_names():
    """ "Two mask streams" names which pre-trainings were made after the change of the masks:
    w/o w_ITM's seeds 1 and 2, Table 5's rows, the link-quality and budget rows and Table 6's
    rows beyond 0 %; every other archived pre-training before it."""
    import shutil

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git checkout: the commits' ancestry cannot be read")
    after = pretrained_after_the_change()
    named = (
        {("no_witm", 1), ("no_witm", 2)}
        | {(system, seed) for system in ("round_robin", "true_pairs_0") for seed in SEEDS}
        | {(system, 0) for system in ("link_noise25", "link_noise50", "uvla_2x", "aligned_vlp_2x")}
    )
    table6 = {
        (system, seed)
        for system, seed in after
        if system.startswith("true_pairs_") and system != "true_pairs_0"
    }
    assert after - table6 == named
