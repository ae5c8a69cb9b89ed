"""The numbers quoted in the reading of Table 1, against the committed archive (how:
``helpers/readings.py``)."""

from __future__ import annotations

import math

import pytest

from helpers.readings import (
    ALIGNED_2X,
    ALIGNED_ITM,
    AT_CHANCE,
    ITM,
    JOINT,
    NOISIER,
    NOISY,
    Quote,
    RESULTS,
    ROUND_ROBIN,
    Readings,
    SEEDS,
    UVLA_2X,
    aligned_itm_share,
    ci,
    f,
    final,
    gap,
    holm_p,
    itm_final,
    last_mean,
    lead,
    learns_from,
    loss,
    lower_on,
    mean,
    paired,
    per_seed,
    pm,
    pooled_test,
    problems,
    row_stat,
    s,
    std,
    t_p,
    trivial,
    value,
)


TIMES = {
    2: "twice",
    3: "three",
    4: "four",
    5: "five",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    10: "ten",
    11: "eleven",
    12: "twelve",
}


def seed_join(values) -> str:
    """``2,000, 3,075 and 2,400``."""
    *first, last = values
    return f"{', '.join(first)} and {last}"


def unweighted_ratios() -> list[float]:
    """Aligned VLP's final validation ITM loss over w/o w_ITM's, seed by seed (neither
    weighted by w_ITM)."""
    return [itm_final("aligned_vlp", k) / itm_final("no_witm", k) for k in SEEDS]


def holding_after_holm() -> str:
    """``μ-VLA above Base, above ... and above ...``: the orderings of Table 1 that hold after
    Holm's correction."""
    from mmf_uvlp.replication.study import TABLES

    names = {
        "base": "Base",
        "u_visualbert": "U-VisualBERT",
        "random_pairs": "Random pairs",
        "uvla": "μ-VLA",
        "aligned_vlp": "Aligned VLP",
    }
    held = [
        (o.above, o.below)
        for o in TABLES["1"].orderings
        if float(holm_p("1", o.above, o.below).split()[-1]) < 0.05
        and gap(o.above, o.below).difference > 0
    ]
    assert all(above == "uvla" for above, _ in held), held  # the sentence names μ-VLA once
    return seed_join(
        f"{'μ-VLA ' if i == 0 else ''}above {names[below]}" for i, (_, below) in enumerate(held)
    )


TABLE1: list[Quote] = [
    lambda: (
        "leads its joint row too, on {} (not significant: paired {}), so the lead need not "
        "come from the tags".format(lower_on(JOINT, ROUND_ROBIN), t_p(JOINT, ROUND_ROBIN))
    ),
    lambda: (
        f"paired {t_p('uvla', 'base')}, {ci('uvla', 'base')} and "
        f"{t_p('aligned_vlp', 'base')}, {ci('aligned_vlp', 'base')}. Corrected by Holm"
    ),
    lambda: (
        f"over the table's seven orderings, μ-VLA's p is "
        f"{holm_p('1', 'uvla', 'base')[4:]} and Aligned VLP's "
        f"{holm_p('1', 'aligned_vlp', 'base')[4:]}: of the seven, only "
        + holding_after_holm()
        + " hold"
    ),
    lambda: (
        f"μ-VLA above random pairs: holds (paired {t_p('uvla', 'random_pairs')}, "
        f"{ci('uvla', 'random_pairs')}; Holm {holm_p('1', 'uvla', 'random_pairs')}); random "
        "pairs above Base: the paper's direction, not significant (paired "
        f"{t_p('random_pairs', 'base')}, {ci('random_pairs', 'base')}; Holm "
        f"{holm_p('1', 'random_pairs', 'base')})"
    ),
    lambda: (
        "U-VisualBERT above Base: holds before Holm's correction, not after (paired "
        f"{t_p('u_visualbert', 'base')}, {ci('u_visualbert', 'base')}; Holm "
        f"{holm_p('1', 'u_visualbert', 'base')}); μ-VLA above U-VisualBERT: holds (paired "
        f"{t_p('uvla', 'u_visualbert')}; Holm {holm_p('1', 'uvla', 'u_visualbert')})"
    ),
    lambda: (
        f"μ-VLA {s(100 * gap('uvla', 'base').difference)} over Base "
        f"({gap('uvla', 'base').ratio:.1f} standard errors) and Aligned VLP "
        f"{s(100 * gap('aligned_vlp', 'base').difference)} "
        f"({gap('aligned_vlp', 'base').ratio:.1f} SE unpaired, "
        f"{gap('aligned_vlp', 'base').paired.ratio:.1f} paired)"
    ),
    lambda: f"(Aligned VLP − Base {s(mean('aligned_vlp', 'nlvr2') - mean('base', 'nlvr2'))} here",
    lambda: (
        f"here Aligned VLP − μ-VLA is {pm(paired('aligned_vlp', 'uvla'))} (paired the "
        f"same, paired t(2) = {gap('aligned_vlp', 'uvla').test.t:.1f}, "
        f"p = {gap('aligned_vlp', 'uvla').test.p:.2f}, {ci('aligned_vlp', 'uvla')})"
    ),
    lambda: "ahead on every seed ({}, {} and {} on seeds 0, 1 and 2)".format(
        *(s(value("uvla", k, "meta") - value("aligned_vlp", k, "meta")) for k in SEEDS)
    ),
    lambda: (
        f"differences of {100 * gap('aligned_vlp', 'uvla').test.detectable:.1f} or more at "
        "80 % power, {} times the paper's gap".format(
            TIMES[round(100 * gap("aligned_vlp", "uvla").test.detectable / 1.5)]
        )
    ),
    lambda: (
        "With a quarter of R-N's links pointed at random regions μ-VLA's seed 0 reads {} "
        "under its own seed 0, with half of them {} under".format(
            f(value("uvla", 0) - value(NOISY, 0)), f(value("uvla", 0) - value(NOISIER, 0))
        )
    ),
    lambda: (
        "neither drop is significant (the 50 % row's {} under μ-VLA's mean: p = {:.2f})".format(
            s(pooled_test(NOISIER, "uvla")[0]), pooled_test(NOISIER, "uvla")[2]
        )
        if pooled_test(NOISIER, "uvla")[2] >= 0.05 and pooled_test(NOISY, "uvla")[2] >= 0.05
        else "a drop is significant"
    ),
    lambda: (
        "Against Aligned VLP's seed 0 the links as built, a quarter and half of them random "
        "give {}, {} and {}".format(
            *(s(value(x, 0) - value("aligned_vlp", 0)) for x in ("uvla", NOISY, NOISIER))
        )
    ),
    lambda: (
        "stays under {} from update {} on, averages {} over its last 500 and ends at {} on "
        "validation: Aligned VLP's final validation ITM loss is {:.1f} to {:.1f} times it, "
        "seed by seed".format(
            loss(AT_CHANCE),
            seed_join(f"{learns_from('no_witm', k, ITM):,}" for k in SEEDS),
            seed_join(loss(last_mean("no_witm", k, ITM)) for k in SEEDS),
            seed_join(loss(itm_final("no_witm", k)) for k in SEEDS),
            min(unweighted_ratios()),
            max(unweighted_ratios()),
        )
    ),
    lambda: (
        "from half-way through the schedule and ends at {} on validation, still above the "
        "unweighted loss".format(loss(itm_final(ALIGNED_2X, 0)))
        if itm_final(ALIGNED_2X, 0) > max(itm_final("no_witm", k) for k in SEEDS)
        else "not above"
    ),
    lambda: (
        f"R-N alone, MLM on the linked phrases and p-MRTC on their linked regions, reaches "
        f"{row_stat('rn')} over three seeds, μ-VLA's level ({row_stat('uvla')}; μ-VLA − "
        f"R-N paired {pm(paired('uvla', 'rn'))})"
    ),
    lambda: (
        f"stays near Base ({f(value('is', 0, 'meta'))} on seed 0, Base "
        f"{row_stat('base')}), as does R-T alone, the tags read with their regions "
        f"({f(value('rt', 0, 'meta'))})"
    ),
    lambda: (
        f"(joint MLM + MRM on unrelated pairs, {s(mean('random_pairs') - mean('base'))} "
        f"over Base) and U-VisualBERT (tags with regions, no sentence, "
        f"{s(mean('u_visualbert') - mean('base'))})"
    ),
    lambda: f"μ-VLA's {s(mean('uvla') - mean('base'))}; training each linked phrase",
    lambda: "its final validation ITM loss is {}, {} and {} on seeds 0, 1 and 2".format(
        *(loss(itm_final("aligned_vlp", k)) for k in SEEDS)
    ),
    lambda: f"against {loss(math.log(2))} (ln 2) for chance",
    lambda: (
        "Its logged training ITM loss stays under {} (ln 2 less 0.02) only from update {}, "
        "{} and {} on, and averages {}, {} and {} over the last 500 updates".format(
            loss(AT_CHANCE),
            *(f"{learns_from('aligned_vlp', k, ALIGNED_ITM):,}" for k in SEEDS),
            *(loss(last_mean("aligned_vlp", k, ALIGNED_ITM)) for k in SEEDS),
        )
    ),
    lambda: "Aligned VLP's ITM learns in the last {:.0f} % of its schedule at most".format(
        aligned_itm_share()
    ),
    lambda: (
        "There μ-VLA still leads on seed 0, {} against {} Meta-Ave ({} between the rows' "
        "seed 0 at 5,000 updates)".format(f(value(UVLA_2X, 0)), f(value(ALIGNED_2X, 0)), s(lead()))
    ),
    lambda: (
        "Its Meta-Ave is {}, {} and {} on seeds 0, 1 and 2".format(*per_seed("aligned_vlp"))
        + f" ({row_stat('aligned_vlp')}; μ-VLA {{}}, {{}} and {{}})".format(*per_seed("uvla"))
    ),
    lambda: (
        "together ({}, {} and {}, against {} and {}, {} and {}, {} and {} on seeds 0 and 2)".format(
            *(f(value("aligned_vlp", 1, t)) for t in ("vqa", "nlvr2", "ve")),
            *(f(value("aligned_vlp", k, t)) for t in ("vqa", "nlvr2", "ve") for k in (0, 2)),
        )
    ),
    lambda: "its validation ITM loss is {} ({} and {}) and its MLM loss {} ({} and {})".format(
        *(
            loss(final("aligned_vlp", k, "pretrain", f"val/aligned_vlp/uvla_{head}"))
            for head in ("itm", "mlm")
            for k in (1, 0, 2)
        )
    ),
    lambda: "Base's seed 1 is its lowest too ({}, against {} and {})".format(
        *(f(value("base", k, "meta")) for k in (1, 0, 2))
    ),
    lambda: "seed-1 gain is still the smallest ({}, against {} and {})".format(
        *(s(value("aligned_vlp", k, "meta") - value("base", k, "meta")) for k in (1, 0, 2))
    ),
    lambda: (
        f"they reach {row_stat('random_pairs')} Meta-Ave: "
        f"{s(mean('random_pairs') - mean('base'))} over Base "
        f"(± {f(paired('random_pairs', 'base')[1])}, "
        f"{gap('random_pairs', 'base').paired.ratio:.1f} SE paired) and "
        f"{f(mean('uvla') - mean('random_pairs'))} under μ-VLA "
        f"(± {f(paired('uvla', 'random_pairs')[1])}, "
        f"{gap('uvla', 'random_pairs').paired.ratio:.0f} SE paired)"
    ),
    lambda: "are VQA {}, NLVR2 {}, VE {} and RefCOCO+ {}, beside μ-VLA's {}, {}, {} and {}".format(
        *(
            pm(paired(system, "base", t))
            for system in ("random_pairs", "uvla")
            for t in ("vqa", "nlvr2", "ve", "refcoco")
        )
    ),
    lambda: (
        f"it reaches {row_stat('u_visualbert')} Meta-Ave (seeds: "
        + ", ".join(per_seed("u_visualbert"))
        + f"): "
        f"{s(mean('u_visualbert') - mean('base'))} over Base "
        f"(± {f(paired('u_visualbert', 'base')[1])}, "
        f"{gap('u_visualbert', 'base').paired.ratio:.1f} SE paired; paper +4.1) and "
        f"{f(mean('uvla') - mean('u_visualbert'))} under μ-VLA "
        f"(± {f(paired('uvla', 'u_visualbert')[1])}, "
        f"{gap('uvla', 'u_visualbert').paired.ratio:.1f} SE paired; paper −5.8)"
    ),
    lambda: (
        "are VQA {}, NLVR2 {}, VE {} and RefCOCO+ {}; against μ-VLA, VQA {}, NLVR2 {}, "
        "VE {} and RefCOCO+ {}".format(
            *(
                pm(paired("u_visualbert", other, t))
                for other in ("base", "uvla")
                for t in ("vqa", "nlvr2", "ve", "refcoco")
            )
        )
    ),
    lambda: (
        f"Random pairs it is {pm(paired('u_visualbert', 'random_pairs'))} Meta-Ave paired "
        "(paper +1.9), a lead no single task decides (VQA {}, NLVR2 {}, VE {}, RefCOCO+ "
        "{})".format(
            *(
                pm(paired("u_visualbert", "random_pairs", t))
                for t in ("vqa", "nlvr2", "ve", "refcoco")
            )
        )
    ),
    lambda: (
        f"Base's smallest margin is NLVR2: {row_stat('base', 'nlvr2')} against the "
        f"{trivial('NLVR2')} printed"
    ),
    # 52.9: the test split's own majority (the world's annotation files, listed below)
    lambda: "the stricter reference ({:.1f} standard errors of the mean)".format(
        (mean("base", "nlvr2") - 52.9) / (std("base", "nlvr2") / math.sqrt(3))
    ),
    lambda: "against the archive's {:.1f} / {:.1f}".format(
        *(100 * final("base", 1, "vqa2", f"{split}/vqa2/vqa_accuracy") for split in ("test", "val"))
    ),
]


# Numbers in the reading that do not come from the archive, each with its source.
TABLE1_ELSEWHERE = [
    "(the corpus links phrases to regions at precision 0.92,",  # the corpus report
    "where the paper has +9.9 and +11.4",  # the paper's Table 1
    "+24.7 in the paper",  # the paper's Table 1
    "The paper has Aligned VLP 1.5 above μ-VLA",  # the paper's Table 1
    "at 5,000 updates",  # the recipe's pre-training budget (configs/study/calibrated.yaml)
    "at update 5,000",  # idem
    "(random pairs +2.2 over Base, μ-VLA +7.7 over random pairs)",  # the paper's Table 3
    "and against 52.9, the test split's own majority",  # the world's NLVR2 test labels
    "logs the same losses to the last digit up to update 450, drifts from update 500 and ends "
    "at test 30.7 / val 31.8",  # a rerun on another CPU, not archived
]


READINGS: Readings = {"Reading of Table 1": (TABLE1, TABLE1_ELSEWHERE)}


def test_every_number_is_the_archive_s_or_has_a_source():
    found = problems(RESULTS.read_text(encoding="utf-8"), READINGS)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "old, new",
    [
        (
            "p = 0.003,\n  95 % CI [+12.2, +19.9]",
            "p = 0.003,\n  95 % CI [+12.2, +19.8]",
        ),  # an interval
        ("μ-VLA's p is 0.02", "μ-VLA's p is 0.03"),  # a p after Holm's correction
        ("Holm p = 0.06)", "Holm p = 0.05)"),  # idem
        ("only μ-VLA above Base, above U-VisualBERT", "only μ-VLA above Base, above Aligned VLP"),
        (
            "(paired the same, paired t(2) = −1.7, p = 0.23, 95 % CI [−16.1, +7.0])",
            "(paired the same, paired t(2) = −1.7, p = 0.23, 95 % CI [−16.1, +7.2])",
        ),
        ("ten times the paper's gap", "nine times the paper's gap"),  # the power against the paper
        ("+2.4, +1.4 and −1.6", "+2.4, +1.4 and −1.8"),  # the link levels against Aligned VLP
        ("under μ-VLA's mean: p = 0.09)", "under μ-VLA's mean: p = 0.05)"),  # a pooled-SD test
        ("update 2,000, 3,075 and 2,400 on", "update 2,000, 3,057 and 2,400 on"),  # unweighted ITM
        ("1.6\n    to 2.3 times it", "1.6\n    to 2.2 times it"),  # the like-for-like ratio
        ("ends at 0.45 on validation", "ends at 0.46 on validation"),  # twice the updates
        ("μ-VLA +16.0 over Base", "μ-VLA +19.0 over Base"),
        ("0.50, 0.62 and 0.57 on seeds", "0.50, 0.52 and 0.57 on seeds"),
        ("update 3,725, 4,175 and 3,875 on", "update 3,725, 4,100 and 3,875 on"),
        ("+9.9 and +11.4", "+9.7 and +11.4"),
        ("neither decided:", "neither decided (3 of them):"),
    ],
)
def test_a_changed_number_fails(old, new):
    text = RESULTS.read_text(encoding="utf-8")
    assert old in text
    assert problems(text.replace(old, new, 1), READINGS)
