"""The numbers quoted in Table 4 and its reading, against the committed archive (how:
``helpers/readings.py``)."""

from __future__ import annotations

import pytest

from helpers.readings import (
    Quote,
    RESULTS,
    Readings,
    SEEDS,
    by_task,
    ci,
    gap,
    paired,
    pm,
    problems,
    row_stat,
    s,
    seed_list,
    t_p,
    value,
    weights,
)


TABLE4_INTRO: list[Quote] = [
    lambda: "it wrote the same weights (SHA-256 {}…, as its record names)".format(
        weights("no_witm", 2)
    ),
]


TABLE4_INTRO_ELSEWHERE = [
    # the runner's console and the remade run's own record, which the archive does not keep
    # (it keeps a run once where a remake logs the same values)
    "the same 32 validation and test values",
    "in 53.2 min against the archived 62.6",
]


TABLE4: list[Quote] = [
    lambda: "Over seeds {} the paired gap w_ITM - w/o w_ITM is {} (paired {}, {})".format(
        seed_list(gap("uvla", "no_witm").paired.seeds),
        pm(paired("uvla", "no_witm")),
        t_p("uvla", "no_witm"),
        ci("uvla", "no_witm"),
    ),
    lambda: "per seed {}, {} and {}".format(
        *(s(value("uvla", k) - value("no_witm", k)) for k in SEEDS)
    ),
    lambda: "the test detects {:.1f} points or more".format(
        100 * gap("uvla", "no_witm").paired.test.detectable
    ),
    lambda: "w/o w_ITM reads {} Meta-Ave, w_ITM {}".format(row_stat("no_witm"), row_stat("uvla")),
    lambda: "w_ITM - w/o w_ITM is VQA {}, NLVR2 {}, VE {} and RefCOCO+ {}".format(
        *by_task("uvla", "no_witm")
    ),
]


TABLE4_ELSEWHERE = [
    "against the paper's +0.5",  # the paper's Table 4: 75.8 with w_ITM, 75.3 without
    "At 80 % power",  # the test's power (render.py)
    "a weight of at most 1",  # a probability (docs/uvla.md)
    "The links here are 92 % right (above)",  # the link precision section
]


READINGS: Readings = {
    "Table 4": (TABLE4_INTRO, TABLE4_INTRO_ELSEWHERE),
    "Reading of Table 4": (TABLE4, TABLE4_ELSEWHERE),
}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        ("p = 0.25, 95 % CI [−5.0, +2.3]", "p = 0.25, 95 % CI [−5.0, +2.5]"),  # an interval
        ("the test detects 4.7 points", "the test detects 4.5 points"),  # the noncentral t's power
        ("per seed −1.9, +0.3 and −2.5", "per seed −1.9, +0.3 and −2.4"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
