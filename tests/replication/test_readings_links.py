"""The numbers quoted in the link precision, the link-quality table and its reading, against the
committed archive (how: ``helpers/readings.py``)."""

from __future__ import annotations

import math

import pytest

from helpers.readings import (
    NOISIER,
    NOISY,
    Quote,
    RESULTS,
    Readings,
    by_task,
    f,
    gap,
    inside,
    interval,
    mean,
    pooled_sd,
    pooled_test,
    prediction_half_width,
    problems,
    s,
    seeds,
    std,
    value,
)


LINKS_INTRO_ELSEWHERE = [
    "with 25 % and 50 % of R-N's linked phrases",  # the two configs' link_noise
    "the same links for every seed, the 25 % among the 50 %",  # idem
    "`projects/uvla/ablations/link_noise25.yaml`, `link_noise50.yaml`",  # their files
    "Seed 0 of both rows is archived whole; seeds 1 and 2 of both are pending",  # its rows
]


def pooled_text(row: str) -> str:
    """``-0.8 against μ-VLA's mean: pooled-SD t(24) = -0.4, p = 0.72, 95 % CI [-5.3, +3.7]``."""
    difference, t, p, low, high = pooled_test(row, "uvla")
    return (
        f"{s(difference)} against μ-VLA's mean: pooled-SD t({pooled_sd()[1]}) = {t:.1f}, "
        f"p = {p:.2f}, {interval(low, high)}"
    )


def not_significant(row: str) -> str:
    return "not significant" if pooled_test(row, "uvla")[2] >= 0.05 else "significant"


LINKS_READING: list[Quote] = [
    lambda: "with three seeds ({:.2f} points on {} degrees of freedom;".format(*pooled_sd()[:2]),
    lambda: f"A quarter of the links wrong: {not_significant(NOISY)}.",
    lambda: (
        "Seed 0 with 25 % of its links random reads a Meta-Ave of {}, {} against μ-VLA's "
        "seed 0".format(f(value(NOISY, 0)), s(value(NOISY, 0) - value("uvla", 0)))
    ),
    lambda: f"and {pooled_text(NOISY)}",
    lambda: (
        "Against μ-VLA's seed 0 it reads {} on VQA, {} on NLVR2, {} on VE and {} on "
        "RefCOCO+".format(*by_task(NOISY, "uvla", seed=0))
    ),
    lambda: (
        f"Half the links wrong: lower on every task at seed 0, {not_significant(NOISIER)}."
        if all(
            value(NOISIER, 0, k) < value("uvla", 0, k) for k in ("vqa", "nlvr2", "ve", "refcoco")
        )
        else "not lower on every task"
    ),
    lambda: (
        "With half of its links random seed 0 reads {}, {} against μ-VLA's seed 0 and "
        "{}, a drop of anything from {} points to none".format(
            f(value(NOISIER, 0)),
            s(value(NOISIER, 0) - value("uvla", 0)),
            pooled_text(NOISIER),
            {8: "eight"}.get(round(-pooled_test(NOISIER, "uvla")[3]), "?"),
        )
        if pooled_test(NOISIER, "uvla")[4] > 0
        else "a drop"
    ),
    lambda: "By task {} VQA, {} NLVR2, {} VE and {} RefCOCO+".format(
        *by_task(NOISIER, "uvla", seed=0)
    ),
    lambda: (
        "Over Aligned VLP's mean μ-VLA leads by {} with the links as built (the rows' "
        "means, Table 1), {} with a quarter of them random and {} with half".format(
            s(100 * gap("uvla", "aligned_vlp").difference),
            s(value(NOISY, 0) - mean("aligned_vlp")),
            s(value(NOISIER, 0) - mean("aligned_vlp")),
        )
    ),
    lambda: "against Aligned VLP's seed 0 the three give {}, {} and {}".format(
        *(s(value(x, 0) - value("aligned_vlp", 0)) for x in ("uvla", NOISY, NOISIER))
    ),
    lambda: "Aligned VLP's own seeds spread by {}".format(f(std("aligned_vlp"))),
    lambda: "own seeds, whose standard deviation is {}".format(f(std("uvla"))),
    lambda: "of μ-VLA would lie in {} ± {:.1f} with 95 % probability".format(
        f(mean("uvla")), prediction_half_width("uvla")
    ),
    lambda: "and the 50 % row's {} would lie {} it".format(
        f(value(NOISIER, 0)), "inside" if inside(value(NOISIER, 0), "uvla") else "outside"
    ),
    lambda: "the study's {} rows with three seeds the same interval is {} ± {:.1f}".format(
        {12: "twelve"}.get(pooled_sd()[2], "?"), f(mean("uvla")), pooled_half_width()
    ),
    lambda: "and {} noisy row is outside it".format(
        "neither"
        if all(abs(value(x, 0) - mean("uvla")) <= pooled_half_width() for x in (NOISY, NOISIER))
        else "a"
    ),
]

LINKS_READING_ELSEWHERE = [
    "(the t prediction interval, mean ± t(0.975, df) × s × √(1 + 1/n))",
    "The 50 % row's pre-training",  # the config's share
    # uvlp-probe-visual-reliance on the 50 % row's seed-0 pre-training (printed, not archived)
    "visual reliance +2.12 ± 0.09 nats",
    "μ-VLA +2.28 / +2.22, Aligned VLP +0.81 / +0.66 / +0.51",  # as in Table 2's reading
    "Seeds 1 and 2 of both rows decide it",
]


def pooled_half_width() -> float:
    """Half the 95 % prediction interval of one more seed of μ-VLA with the pooled spread,
    t(0.975, df) x s x sqrt(1 + 1/n), in points."""
    from scipy import stats

    sd, df, _ = pooled_sd()
    return float(stats.t.ppf(0.975, df) * sd * math.sqrt(1 + 1 / len(seeds("uvla"))))


# The corpus builder's report on the corpus the study builds (report/report.json; built from
# the world, not archived): every number of that section is from it.
LINKS_ELSEWHERE = [
    "fingerprint 902bbc49ec7ffe9f",
    "| 1.00 | 370,816 | 87.9 % | 0.933 |",
    "| [0.90, 0.95) | 43 | 0.0 % | 0.000 |",
    "| [0.85, 0.90) | 21,963 | 5.2 % | 0.989 |",
    "| [0.80, 0.85) | 23,863 | 5.7 % | 0.898 |",
    "| [0.75, 0.80) | 57 | 0.0 % | 0.000 |",
    "| [0.70, 0.75) | 621 | 0.1 % | 0.000 |",
    "| [0.65, 0.70) | 4,279 | 1.0 % | 0.000 |",
    "| all | 421,642 | 100 % | 0.923 |",
    "(the phrase–region similarity; 1.00:",
    "The links are 92 % right",
    "The links under 0.80 (1.2 % of them) are all wrong and those between 0.80 and 0.90 are "
    "right at 0.90 and 0.99; but most wrong links, about 24,900 of the 32,600, score 1.00",
    "The grounded rate (the region's label is a true class, named or not) is 0.935.",
]


READINGS: Readings = {
    "Link precision of the calibrated corpus": ([], LINKS_ELSEWHERE),
    "Link quality": ([], LINKS_INTRO_ELSEWHERE),
    "Reading of the link-quality table": (LINKS_READING, LINKS_READING_ELSEWHERE),
}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        (
            "+3.7 with a quarter of them random and +0.7",
            "+3.7 with a quarter of them random and +0.9",
        ),
        ("would lie in 74.0 ± 1.0", "would lie in 74.0 ± 1.2"),  # μ-VLA's own interval
        ("p = 0.09, 95 % CI [-8.3, +0.7], a drop", "p = 0.09, 95 % CI [-8.3, +0.9], a drop"),
        ("the three give +2.4, +1.4 and -1.6", "the three give +2.4, +1.4 and -1.8"),
        ("the same interval is 74.0 ± 4.5", "the same interval is 74.0 ± 4.7"),
        ("(1.88 points on 24 degrees", "(1.86 points on 24 degrees"),  # the pooled spread
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
