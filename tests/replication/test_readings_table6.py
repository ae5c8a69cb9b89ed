"""The numbers quoted in Table 6's reading, against the committed archive (how:
``helpers/readings.py``)."""

from __future__ import annotations

import pytest

from helpers.readings import (
    Quote,
    RESULTS,
    Readings,
    by_task,
    f,
    interval,
    pooled_sd,
    pooled_test,
    problems,
    s,
    seeds,
    value,
)

NONE, FIFTH = "true_pairs_0", "true_pairs_20"
SHARES = {NONE: 0, FIFTH: 20}


def trend() -> tuple[float, float, int, float, float, float]:
    """(slope, t, df, p, low, high) of the least-squares line of Meta-Ave on the share of
    true pairs (%), over every archived seed of the rows with one, as the table fits it."""
    from scipy import stats

    points = [(share, value(row, seed)) for row, share in SHARES.items() for seed in seeds(row)]
    fit = stats.linregress(*zip(*points))
    df = len(points) - 2
    half = stats.t.ppf(0.975, df) * fit.stderr
    return fit.slope, fit.slope / fit.stderr, df, fit.pvalue, fit.slope - half, fit.slope + half


def pooled_text() -> str:
    difference, t, p, low, high = pooled_test(FIFTH, NONE)
    return (
        f"{s(difference)} against its mean: pooled-SD t({pooled_sd()[1]}) = {t:.1f}, "
        f"p = {p:.2f}, {interval(low, high)}"
    )


def below_every_seed(task: str) -> bool:
    return all(value(FIFTH, 0, task) < value(NONE, seed, task) for seed in seeds(NONE, task))


TABLE6: list[Quote] = [
    lambda: (
        "A fifth of the pairs true against none: not significant."
        if pooled_test(FIFTH, NONE)[2] >= 0.05
        else "A fifth of the pairs true against none: significant."
    ),
    lambda: "Seed 0 of the 20 % row reads a Meta-Ave of {}, {} against the 0 % row's seed 0".format(
        f(value(FIFTH, 0)), s(value(FIFTH, 0) - value(NONE, 0))
    ),
    lambda: f"and {pooled_text()}.",
    # the paper's Table 6: 20 % 73.5, 0 % 68.1
    lambda: "The paper's +5.4 (73.5 against 68.1) lies {} that interval".format(
        "above" if pooled_test(FIFTH, NONE)[4] < 5.4 else "inside"
    ),
    lambda: "the 20 % row reads {} on VQA, {} on NLVR2, {} on VE and {} on RefCOCO+".format(
        *by_task(FIFTH, NONE, seed=0)
    ),
    lambda: "Its NLVR2, {}, is {} each of the 0 % row's seeds ({})".format(
        f(value(FIFTH, 0, "nlvr2")),
        "below" if below_every_seed("nlvr2") else "not below",
        ", ".join(f(value(NONE, seed, "nlvr2")) for seed in seeds(NONE, "nlvr2")),
    ),
    lambda: (
        "falls by {:.3f} Meta-Ave points per point of true pairs".format(-trend()[0])
        if trend()[0] < 0
        else "rises"
    ),
    lambda: "(t({2}) = {1:.1f}, p = {3:.2f}, 95 % CI [{4:+.3f}, {5:+.3f}])".format(*trend()),
]

TABLE6_ELSEWHERE = [
    "against the paper's +0.082",  # the paper's Meta-Aves, as the table prints it
    "Rows 40 % to 100 %",  # the pending rows
    "0 % row",  # idem
]

TABLE6_INTRO_ELSEWHERE = [
    "`projects/baselines/paired_ratio/true_pairs_{0,20,40,60,80,100}.yaml`",
    "0 % row is Table 5's joint row, three seeds",
    "Seed 0 of the 20 % row is archived whole, of the 40 % row its pre-training and its VQA2 "
    "and RefCOCO+ fine-tunings; the 40 % row's NLVR2 and VE and the rows from 60 % to 100 % "
    "are pending",
]

READINGS: Readings = {
    "Table 6": ([], TABLE6_INTRO_ELSEWHERE),
    "Reading of Table 6 (its 0 % and 20 % rows)": (TABLE6, TABLE6_ELSEWHERE),
}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        ("a Meta-Ave of 60.8, -1.0 against", "a Meta-Ave of 60.8, -1.2 against"),
        ("CI [-5.6, +3.4]. The", "CI [-5.6, +3.6]. The"),
        ("-7.1 on\n  NLVR2", "-7.3 on\n  NLVR2"),
        (
            "is below each of the 0 % row's seeds (69.1, 66.6, 63.6)",
            "is below each of the 0 % row's seeds (69.1, 66.6, 62.6)",
        ),
        ("falls by 0.054", "falls by 0.045"),
        ("lies above that", "lies inside that"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
