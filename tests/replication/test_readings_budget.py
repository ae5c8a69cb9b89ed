"""The numbers quoted in the budget check (twice the updates) and its reading, against the
committed archive (how: ``helpers/readings.py``)."""

from __future__ import annotations

import math

import pytest

from helpers.readings import (
    ALIGNED_2X,
    ALIGNED_ITM,
    AT_CHANCE,
    ITM,
    Quote,
    RESULTS,
    Readings,
    SEEDS,
    UVLA_2X,
    aligned_itm_share,
    by_task,
    curriculum_on,
    f,
    interval_half_width,
    itm_final,
    last_mean,
    last_share,
    lead,
    learns_from,
    loss,
    mean,
    paired,
    pm,
    pooled_sd,
    prediction_half_width,
    problems,
    s,
    value,
)


BUDGET_INTRO: list[Quote] = [
    lambda: "at 5,000 updates it learns in the last {:.0f} % of the schedule at most".format(
        aligned_itm_share()
    ),
    lambda: "epoch 0.5, at update {:,} in both μ-VLA rows".format(curriculum_on(UVLA_2X, 0)),
]


BUDGET_INTRO_ELSEWHERE = [
    # the rows' schedule: the recipe's 5,000 updates, twice (study.py: updates=2)
    "pre-trained for 10,000 updates instead of the recipe's 5,000",
    "warm-up over the first 10 %",  # steps.py: schedule_options
    "half-way through 5,000 updates, under a quarter of the way through 10,000",  # 2,298 above
    "beside both rows at 5,000 updates as archived",  # Table 1's rows
    "at 5,000 updates name no device",  # the archive's records
    "with their own rows at 5,000 updates",  # idem
]


def pooled_half_width() -> float:
    """Half the 95 % prediction interval of one more seed of a three-seed row with the pooled
    spread, t(0.975, df) x s x sqrt(1 + 1/3), in points."""
    from scipy import stats

    sd, df, _ = pooled_sd()
    return float(stats.t.ppf(0.975, df) * sd * math.sqrt(1 + 1 / 3))


def pooled_inside(x: float, system: str) -> bool:
    return abs(x - mean(system)) <= pooled_half_width()


BUDGET: list[Quote] = [
    lambda: (
        "With 10,000 updates Aligned VLP's logged training ITM loss stays under {} (ln 2 "
        "less 0.02) from update {:,} on, in the last {:.0f} % of its schedule".format(
            loss(AT_CHANCE),
            learns_from(ALIGNED_2X, 0, ALIGNED_ITM),
            last_share(ALIGNED_2X, 0, ALIGNED_ITM),
        )
    ),
    lambda: (
        "(at 5,000 updates from update {}, {} and {} on seeds 0, 1 and 2, the last {:.0f} % "
        "at most)".format(
            *(f"{learns_from('aligned_vlp', k, ALIGNED_ITM):,}" for k in SEEDS), aligned_itm_share()
        )
    ),
    lambda: (
        "It averages {} over its last 500 updates ({}, {} and {} at 5,000) and its final "
        "validation ITM loss is {} ({}, {} and {}), against {} for chance".format(
            loss(last_mean(ALIGNED_2X, 0, ALIGNED_ITM)),
            *(loss(last_mean("aligned_vlp", k, ALIGNED_ITM)) for k in SEEDS),
            loss(itm_final(ALIGNED_2X, 0)),
            *(loss(itm_final("aligned_vlp", k)) for k in SEEDS),
            loss(math.log(2)),
        )
    ),
    lambda: (
        "μ-VLA's ITM at 10,000 updates stays under {} from update {:,} on ({}, {} and {} at "
        "5,000), averages {} over its last 500 ({}, {} and {}) and ends at {} on validation "
        "({} on seed 0 at 5,000)".format(
            loss(AT_CHANCE),
            learns_from(UVLA_2X, 0, ITM),
            *(f"{learns_from('uvla', k, ITM):,}" for k in SEEDS),
            loss(last_mean(UVLA_2X, 0, ITM)),
            *(loss(last_mean("uvla", k, ITM)) for k in SEEDS),
            loss(itm_final(UVLA_2X, 0)),
            loss(itm_final("uvla", 0)),
        )
    ),
    lambda: (
        "moves Aligned VLP's onset {} in updates, and takes {} off its final validation "
        "loss on the same seed".format(
            "later"
            if learns_from(ALIGNED_2X, 0, ALIGNED_ITM) > learns_from("aligned_vlp", 0, ALIGNED_ITM)
            else "earlier",
            loss(itm_final("aligned_vlp", 0) - itm_final(ALIGNED_2X, 0)),
        )
    ),
    lambda: (
        "its final {} is still {} the unweighted ITM loss of μ-VLA w/o w_ITM at 5,000 updates "
        "({}, {} and {} on seeds 0, 1 and 2, Table 4)".format(
            loss(itm_final(ALIGNED_2X, 0)),
            "above"
            if itm_final(ALIGNED_2X, 0) > max(itm_final("no_witm", k) for k in SEEDS)
            else "not above",
            *(loss(itm_final("no_witm", k)) for k in SEEDS),
        )
    ),
    lambda: (
        "With 10,000 updates μ-VLA reads a Meta-Ave of {} on seed 0 and Aligned VLP {}, on "
        "one device: a gap of {}, against {} between the two rows' seed 0 at 5,000 "
        "updates".format(
            f(value(UVLA_2X, 0)), f(value(ALIGNED_2X, 0)), s(lead(UVLA_2X, ALIGNED_2X)), s(lead())
        )
    ),
    lambda: (
        "At 5,000 updates the rows' paired gap is {} over three seeds, and one more seed's "
        "gap lies in {} ± {:.1f} with 95 % probability".format(
            pm(paired("uvla", "aligned_vlp")),
            f(paired("uvla", "aligned_vlp")[0]),
            interval_half_width([value("uvla", k) - value("aligned_vlp", k) for k in SEEDS]),
        )
    ),
    lambda: (
        "By task the rows at 10,000 updates differ by {} on VQA, {} on NLVR2, {} on VE and "
        "{} on RefCOCO+".format(*by_task(UVLA_2X, ALIGNED_2X, seed=0))
    ),
    lambda: (
        "μ-VLA's {} is {} over its seed 0 and {} the interval one more seed at 5,000 "
        "updates lies in by the study's pooled seed spread ({} ± {:.1f}; ± {:.1f} by μ-VLA's "
        "own three seeds)".format(
            f(value(UVLA_2X, 0)),
            s(value(UVLA_2X, 0) - value("uvla", 0)),
            "inside" if pooled_inside(value(UVLA_2X, 0), "uvla") else "outside",
            f(mean("uvla")),
            pooled_half_width(),
            prediction_half_width("uvla"),
        )
    ),
    lambda: (
        "by task {} on VQA, {} on NLVR2, {} on VE and {} on RefCOCO+, gains on VQA and "
        "NLVR2 that the loss on RefCOCO+ nearly cancels".format(*by_task(UVLA_2X, "uvla", seed=0))
    ),
    lambda: (
        "Aligned VLP's {} is {} over its seed 0 ({}, {}, {} and {} by task), {} each of "
        "its three seeds at 5,000 updates and {} its own interval by the pooled spread ({} ± "
        "{:.1f}; ± {:.1f} by its own three seeds, which its seed 1 widens) and {} μ-VLA's "
        "too".format(
            f(value(ALIGNED_2X, 0)),
            s(value(ALIGNED_2X, 0) - value("aligned_vlp", 0)),
            *by_task(ALIGNED_2X, "aligned_vlp", seed=0),
            "above"
            if all(value(ALIGNED_2X, 0) > value("aligned_vlp", k) for k in SEEDS)
            else "not above",
            "inside" if pooled_inside(value(ALIGNED_2X, 0), "aligned_vlp") else "outside",
            f(mean("aligned_vlp")),
            pooled_half_width(),
            prediction_half_width("aligned_vlp"),
            "inside" if pooled_inside(value(ALIGNED_2X, 0), "uvla") else "outside",
        )
    ),
    lambda: "on seed 0 μ-VLA keeps the lead, by about {} its seed-0 lead at 5,000 updates".format(
        "half" if round(2 * lead(UVLA_2X, ALIGNED_2X) / lead()) == 1 else "not half"
    ),
]


BUDGET_ELSEWHERE = [
    "(the t prediction interval, mean ± t(0.975, df) × s × √(1 + 1/n))",  # its formula
    "One seed on each side gives the gap no standard error",  # the table's gap lines
    "Each row against its own at 5,000 updates",  # the recipe's budget
    "those at 5,000 before",  # idem
]


READINGS: Readings = {
    "Twice the pre-training updates": (BUDGET_INTRO, BUDGET_INTRO_ELSEWHERE),
    "Reading of the budget check": (BUDGET, BUDGET_ELSEWHERE),
}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        ("its final 0.45\n  is still above", "its final 0.47\n  is still above"),  # like for like
        ("(74.0 ± 4.5; ± 1.0 by", "(74.0 ± 4.7; ± 1.0 by"),  # the pooled prediction interval
        ("from update 4,825 on", "from update 4,285 on"),
        ("a gap of +1.2, against +2.4", "a gap of +1.4, against +2.4"),
        ("seed 1 widens) and inside μ-VLA's too", "seed 1 widens) and outside μ-VLA's too"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
