"""The numbers quoted in Table 2 and its reading, against the committed archive (how:
``helpers/readings.py``)."""

from __future__ import annotations

import math
import statistics

import pytest

from mmf_uvlp.replication.render import format_p

from helpers.readings import (
    ITM,
    Quote,
    RESULTS,
    Readings,
    SEEDS,
    by_task,
    ci,
    f,
    gap,
    gap_text,
    hm,
    holm_p,
    interval,
    logged,
    loss,
    mean,
    p_of,
    paired,
    paired_p_value,
    pm,
    pooled_sd,
    pooled_test,
    problems,
    rest,
    row_stat,
    run_minutes,
    s,
    t_text,
    unit_text,
    value,
    weights,
)


def span(system: str, first: int, last: int) -> str:
    """``0.34–0.35``: the range of I-S's logged ITM loss over updates first..last."""
    found = [v for update, v in logged(system, 0, ITM).items() if first <= update <= last]
    return f"{loss(min(found))}–{loss(max(found))}"


def halves(system: str) -> str:
    """``between updates 1,125 and 1,150``: where the logged ITM loss first falls under half
    its start (the curriculum's w_ITM switching on while ITM is at chance)."""
    series = sorted(logged(system, 0, ITM).items())
    index = next(i for i, (_, v) in enumerate(series) if v < series[0][1] / 2 + 0.01)
    return f"between updates {series[index - 1][0]:,} and {series[index][0]:,}"


def significant_tasks(above: str, below: str) -> str:
    """``significant`` when no task's paired t(2) over the three seeds reaches p < 0.05."""
    tasks = ("vqa", "nlvr2", "ve", "refcoco")
    return "significant" if all(paired_p_value(above, below, k) >= 0.05 for k in tasks) else "?"


def pooled_text(above: str, below: str) -> str:
    """``pooled-SD t(24) = 6.5, p < 0.001, 95 % CI [+9.7, +18.7]``: above's three seeds against
    below's seed 0, read against the archive's pooled seed spread."""
    difference, t, p, low, high = pooled_test(below, above)
    return f"pooled-SD t({pooled_sd()[1]}) = {-t:.1f}, {format_p(p)}, {interval(-high, -low)}"


TABLE2: list[Quote] = [
    lambda: f"(the pooled-SD t, {pooled_sd()[1]} degrees of freedom, under the table)",
    lambda: "the three against R-T alone or I-S alone hold (each {})".format(
        "p < 0.001"
        if all(
            holm_p("2", a, b) == "p < 0.001"
            for a, b in (("rt_rn", "rt"), ("uvla", "rt"), ("uvla", "is"))
        )
        else "not p < 0.001"
    ),
    lambda: (
        "the two between three-seed rows are not significant"
        if all(p_of(a, b) >= 0.05 for a, b in (("uvla", "rt_rn"), ("uvla", "rn")))
        else "significant"
    ),
    lambda: (
        f"All three above R-T alone: holds, {s(mean('uvla') - value('rt', 0))} Meta-Ave, "
        f"μ-VLA's three seeds against R-T's seed 0 ({s(value('uvla', 0) - value('rt', 0))} "
        f"seed 0 against seed 0; paper +6.3): {pooled_text('uvla', 'rt')}"
    ),
    lambda: (
        f"R-T alone is {f(value('rt', 0) - mean('base'))} above Base (paper +3.6), under "
        f"U-VisualBERT ({f(mean('u_visualbert'))}) and random pairs "
        f"({f(mean('random_pairs'))})"
    ),
    lambda: (
        "By task μ-VLA leads it on VQA ({}), NLVR2 ({}) and VE ({}), and by {} only on "
        "RefCOCO+".format(
            *by_task("uvla", "rt", seed=0, of="mean")[:3],
            f(mean("uvla", "refcoco") - value("rt", 0, "refcoco")),
        )
    ),
    lambda: f"All three above R-N alone: {gap_text('uvla', 'rn', '+2.1')}",
    lambda: t_text("uvla", "rn"),
    lambda: (
        ", nearly four times the paper's gap"
        if 3.5 < 100 * gap("uvla", "rn").test.detectable / 2.1 < 4
        else "not nearly four"
    ),
    lambda: "what R-T and I-S add to R-N lies anywhere from a loss of {} to a gain of {}".format(
        *(f(abs(100 * bound)) for bound in gap("uvla", "rn").test.interval)
    ),
    lambda: (
        "Per seed μ-VLA − R-N: {}, {}, {}; R-N's Meta-Ave spreads over {} to {} (seed 1's "
        "NLVR2 reaches {}; {} and {} on seeds 0 and 2; μ-VLA {} to {}), μ-VLA's over {} to "
        "{}".format(
            *(s(value("uvla", k) - value("rn", k)) for k in SEEDS),
            f(min(value("rn", k) for k in SEEDS)),
            f(max(value("rn", k) for k in SEEDS)),
            *(f(value("rn", k, "nlvr2")) for k in (1, 0, 2)),
            f(min(value("uvla", k, "nlvr2") for k in SEEDS)),
            f(max(value("uvla", k, "nlvr2") for k in SEEDS)),
            f(min(value("uvla", k) for k in SEEDS)),
            f(max(value("uvla", k) for k in SEEDS)),
        )
    ),
    lambda: (
        "seeds: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}, none {}. R-N alone "
        "({}) keeps nearly all of μ-VLA's gain over Base ({} against {})".format(
            *by_task("uvla", "rn"),
            significant_tasks("uvla", "rn"),
            row_stat("rn"),
            s(mean("rn") - mean("base")),
            s(mean("uvla") - mean("base")),
        )
    ),
    lambda: (
        f"All three above I-S alone: holds, {s(mean('uvla') - value('is', 0))}, μ-VLA's "
        f"three seeds against I-S's seed 0 ({s(value('uvla', 0) - value('is', 0))} seed 0 "
        f"against seed 0; paper +1.9): {pooled_text('uvla', 'is')}"
    ),
    lambda: (
        f"is here at Base's level ({f(value('is', 0))}, "
        f"{s(value('is', 0) - mean('base'))} over Base)"
    ),
    lambda: (
        "By task, μ-VLA − I-S alone: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}; I-S's VQA, {}, "
        "is under Base's {}".format(
            *by_task("uvla", "is", seed=0, of="mean"),
            f(value("is", 0, "vqa")),
            row_stat("base", "vqa"),
        )
    ),
    # m = 0.5: the curriculum's start (projects/uvla configs); the update, from the log
    lambda: f"reaches m = 0.5 epoch {halves('is')} (its logged ITM loss halves there)",
    lambda: (
        f"(its logged ITM loss {loss(logged('uvla', 0, ITM)[2200])} at update 2,200, "
        f"{loss(logged('uvla', 0, ITM)[2800])} at 2,800)"
    ),
    lambda: (
        f"From update 1,150 to 3,800, I-S's logged ITM loss stays at "
        f"{span('is', 1150, 3800)}, ln 2 × 0.5"
    ),
    lambda: f"it is {span('is', 4525, 5000)} only from update 4,525 on",
    lambda: f"on true captions and reaches {f(mean('aligned_vlp'))}",
    lambda: (
        f"R-T + R-N above R-T alone: holds, {s(mean('rt_rn') - value('rt', 0))} over R-T + "
        f"R-N's three seeds ({s(value('rt_rn', 0) - value('rt', 0))} on seed 0; paper +5.5): "
        f"{pooled_text('rt_rn', 'rt')}"
    ),
    lambda: "By task on seed 0: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}".format(
        *by_task("rt_rn", "rt", seed=0)
    ),
    lambda: f"All three above R-T + R-N: {gap_text('uvla', 'rt_rn', '+0.8')}",
    lambda: t_text("uvla", "rt_rn"),
    lambda: (
        ", ten times the paper's gap"
        if round(100 * gap("uvla", "rt_rn").test.detectable / 0.8) == 10
        else "not ten"
    ),
    lambda: "Per seed μ-VLA − R-T + R-N: {}, {}, {}".format(
        *(s(value("uvla", k) - value("rt_rn", k)) for k in SEEDS)
    ),
    lambda: "Seeds 0 and 1 alone give {} ± {}, paired".format(
        s(statistics.fmean(value("uvla", k) - value("rt_rn", k) for k in (0, 1))),
        f(statistics.stdev(value("uvla", k) - value("rt_rn", k) for k in (0, 1)) / math.sqrt(2)),
    ),
    lambda: (
        "R-T + R-N's NLVR2 reaches {} there ({} and {} on seeds 0 and 1; μ-VLA {} to {}), "
        "as R-N's reaches {} on its seed 1".format(
            *(f(value("rt_rn", k, "nlvr2")) for k in (2, 0, 1)),
            f(min(value("uvla", k, "nlvr2") for k in SEEDS)),
            f(max(value("uvla", k, "nlvr2") for k in SEEDS)),
            f(value("rn", 1, "nlvr2")),
        )
    ),
    lambda: (
        "By task, paired over the three seeds: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}, none "
        "{}. NLVR2's spread from seed to seed, {:.0f} to {:.0f} for R-N and "
        "R-T + R-N".format(
            *by_task("uvla", "rt_rn"),
            significant_tasks("uvla", "rt_rn"),
            min(value(r, k, "nlvr2") for r in ("rn", "rt_rn") for k in SEEDS),
            max(value(r, k, "nlvr2") for r in ("rn", "rt_rn") for k in SEEDS),
        )
    ),
    lambda: (
        "R-T + R-N against R-N alone: {} ± {} over three seeds each (paired {}; {}, {} and "
        "{} on seeds 0, 1 and 2".format(
            s(100 * gap("rt_rn", "rn").difference),
            f(100 * gap("rt_rn", "rn").stderr),
            pm(paired("rt_rn", "rn")),
            *(s(value("rt_rn", k) - value("rn", k)) for k in SEEDS),
        )
    ),
    lambda: (
        f"The paired t(2) = {gap('rt_rn', 'rn').test.t:.1f} (p = "
        f"{gap('rt_rn', 'rn').test.p:.2f}) detects only a difference of "
        f"{100 * gap('rt_rn', 'rn').test.detectable:.1f} or more"
    ),
    lambda: (
        "twelve times the paper's 1.3; its 95 % interval is {}".format(ci("rt_rn", "rn")[8:])
        if round(100 * gap("rt_rn", "rn").test.detectable / 1.3) == 12
        else "not twelve"
    ),
    lambda: "By task, paired: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}".format(*by_task("rt_rn", "rn")),
    lambda: (
        f"R-N alone above R-T alone: {s(value('rn', 0) - value('rt', 0))} on seed 0, "
        f"{s(mean('rn') - value('rt', 0))} with R-N's three seeds"
    ),
    lambda: "seed 0: VQA {}, NLVR2 {}, VE {}, RefCOCO+ {}".format(*by_task("rn", "rt", seed=0)),
    lambda: (
        f"(R-T: weights {weights('rt', 0)}, read by its NLVR2 and VE fine-tunings; R-N: "
        f"{weights('rn', 0)}, read by its VQA, NLVR2 and VE fine-tunings; I-S: "
        f"{weights('is', 0)}, read by all four; R-T + R-N: {weights('rt_rn', 0)};"
    ),
]


TABLE2_ELSEWHERE = [
    "(paper +4.2;",  # the paper's Table 2
    "the paper's I-S, its best single granularity (73.9)",  # the paper's Table 2
    "the paper has R-T + R-N 1.3 above R-N",  # the paper's Table 2
    "w_ITM ≈ 0.5",  # the curriculum's weight of a pair at chance (docs/uvla.md)
    "(`--seeds 3 --only-seeds 1,2`)",  # a command's options
    "near update 2,300",  # μ-VLA's epoch from its datasets' sizes and the batch size
    "at 80 % power",  # the test's power (render.py)
    # the probes of the seed-0 pre-trainings (uvlp-probe-*; printed, not archived)
    "raises its MRC loss from 0.87 to 2.89 nats, accuracy 80 % to 20 %, +2.02 ± 0.07; μ-VLA: "
    "0.01–0.02 nats",
    "(+2.20 ± 0.07 nats)",
    "its visual reliance is +0.11 ± 0.08 nats",
    "R-N's +2.65 ± 0.10 and μ-VLA's +2.28 / +2.22, and its class-word MLM is 5.46 nats with "
    "the caption's own image against R-N's 1.65",
    "(+2.65 nats, seed 0's pre-training)",
    "visual reliance +0.66 ± 0.06 nats (Aligned VLP +0.81 / +0.66 / +0.51, R-N +2.65, μ-VLA "
    "+2.28 / +2.22)",
    "(visual reliance +2.21 ± 0.08 nats against R-T alone's +0.11 ± 0.08)",
    "(+0.14 ± 0.01 nats against R-T alone's +2.02)",
    "(+2.07 ± 0.06)",
    "(visual reliance +2.21 and +2.65 nats, seed 0)",
    "600 held-out captions or images each",
]


TABLE2_INTRO: list[Quote] = [
    lambda: (
        "seed 1 of R-N ({} with two threads, one run at a time: {}, its fine-tunings and "
        "split evaluation {:.1f} min)".format(
            hm(run_minutes("rn", 1, "pretrain") + rest("rn", 1)),
            f"pre-training {run_minutes('rn', 1, 'pretrain'):.1f} min",
            rest("rn", 1),
        )
    ),
    lambda: (
        "and of R-T + R-N ({}: {}, {}, of which its RefCOCO+ fine-tuning took {:.1f} min".format(
            *unit_text("rt_rn", 1, "the rest"), run_minutes("rt_rn", 1, "refcoco_plus")
        )
    ),
    lambda: "seed 2 of R-N in {} ({}, {},".format(*unit_text("rn", 2, "the rest")),
    lambda: "seed 2 of R-T + R-N in {} ({} while another job shared the CPU, {},".format(
        *unit_text("rt_rn", 2, "the rest")
    ),
]


TABLE2_INTRO_ELSEWHERE = [
    "on a 2-core CPU",  # the machine the study ran on
    "stopped after update 800 and resumed from its update-750 checkpoint",  # its train.log
]


READINGS: Readings = {
    "Table 2": (TABLE2_INTRO, TABLE2_INTRO_ELSEWHERE),
    "Reading of Table 2": (TABLE2, TABLE2_ELSEWHERE),
}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        ("paper +6.3): pooled-SD t(24) = 6.5", "paper +6.3): pooled-SD t(24) = 6.3"),  # a pooled t
        ("(+14.4 seed 0 against seed 0", "(+14.2 seed 0 against seed 0"),  # seed 0 against seed 0
        ("(+14.9 seed 0 against seed 0", "(+14.7 seed 0 against seed 0"),  # idem, I-S
        ("95 % CI [−5.4, +7.0]; it detects 8.1", "95 % CI [−5.4, +7.2]; it detects 8.1"),
        ("a gain of 7.0 (the interval above)", "a gain of 7.2 (the interval above)"),
        ("twelve times the paper's 1.3", "eleven times the paper's 1.3"),  # power against the paper
        ("interval is [−12.8, +10.7]", "interval is [−12.8, +10.9]"),
        ("(each p < 0.001)", "(each p < 0.01)"),  # Holm's correction over the table
        ("NLVR2 reaches 94.9", "NLVR2 reaches 95.9"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
