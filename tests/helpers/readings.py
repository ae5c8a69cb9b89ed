"""What the tests of the numbers quoted in docs/results.md share (``tests/replication/
test_readings_*.py``, one file a table as ``mmf_uvlp/replication/study.py`` has them): the
committed archive read as the study reads it, the quotes' number formats and the check.

Each section a test file names (a heading of docs/results.md) is checked whole: every number
in it is either a quote computed from the archive's ``train.log`` files and records (a
cell's mean, a seed's Meta-Ave, a paired gap and its test, a final validation loss, ...)
and must read as the archive gives it, or a number from elsewhere, each named with its
source (the paper, the world's annotation files, a probe or a rerun that is not archived),
which must read as listed; a number that is neither fails, so a changed number fails the
suite. Reading the logs takes a second; nothing is trained or generated.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from functools import cache

from mmf_uvlp.replication.aggregate import meta_gap, summarize_row
from mmf_uvlp.report.results import LOG_FILE, collect_run, parse_log
from mmf_uvlp.report.table import meta_average

from helpers import REPO


RESULTS = REPO / "docs" / "results.md"


ARCHIVE = REPO / "results" / "archive" / "calibrated"


SEEDS = (0, 1, 2)


TASKS = {
    "vqa": ("vqa2", "test"),
    "nlvr2": ("nlvr2", "test"),
    "ve": ("visual_entailment", "test"),
    "val": ("refcoco_plus", "val"),
    "testA": ("refcoco_plus", "testA"),
    "testB": ("refcoco_plus", "testB"),
}


@cache
def cells(system: str, seed: int) -> dict:
    """The table cells of (system, seed) from its archived runs, as the study reads them."""
    folder = ARCHIVE / system / f"seed{seed}"
    found = {}
    for task in ("vqa2", "nlvr2", "visual_entailment"):
        if (folder / task / LOG_FILE).is_file():
            run = collect_run(folder / task).cells
            if (task, "test") in run:
                found[task, "test"] = run[task, "test"]
    if (folder / "refcoco_plus_splits" / LOG_FILE).is_file():
        found.update(
            {
                cell: value
                for cell, value in collect_run(folder / "refcoco_plus_splits").cells.items()
                if cell[0] == "refcoco_plus"
            }
        )
    return found


def value(system: str, seed: int, task: str = "meta") -> float:
    """A seed's value of ``task`` (a key of :data:`TASKS`, ``refcoco``: the mean of the three
    splits, ``meta``: its Meta-Ave) in points."""
    unit = cells(system, seed)
    if task == "meta":
        return 100 * meta_average(unit).value
    if task == "refcoco":
        return 100 * statistics.fmean(unit[TASKS[split]] for split in ("val", "testA", "testB"))
    return 100 * unit[TASKS[task]]


def seeds(system: str, task: str | None = "meta") -> tuple[int, ...]:
    """The seeds of ``system`` with a value of ``task`` (``meta``: every task, as the tables'
    Meta-Ave; None: any archived run)."""
    needed = {
        "meta": list(TASKS.values()),
        None: [],
        "refcoco": [TASKS[split] for split in ("val", "testA", "testB")],
    }.get(task, [TASKS.get(task)])
    return tuple(
        seed
        for seed in SEEDS
        if cells(system, seed) and all(cell in cells(system, seed) for cell in needed)
    )


def mean(system: str, task: str = "meta") -> float:
    return statistics.fmean(value(system, seed, task) for seed in seeds(system, task))


def std(system: str, task: str = "meta") -> float:
    return statistics.stdev(value(system, seed, task) for seed in seeds(system, task))


def shared_seeds(above: str, below: str, task: str = "meta") -> list[int]:
    """The seeds both rows have a value of ``task`` on."""
    return [seed for seed in seeds(above, task) if seed in seeds(below, task)]


def paired(above: str, below: str, task: str = "meta") -> tuple[float, float]:
    """The mean over the shared seeds of above − below and its standard error, in points."""
    shared = shared_seeds(above, below, task)
    differences = [value(above, s, task) - value(below, s, task) for s in shared]
    return (statistics.fmean(differences), statistics.stdev(differences) / math.sqrt(len(shared)))


def gap(above: str, below: str):
    """:func:`meta_gap` of two rows of the archive (difference, Welch SE, paired, test)."""

    def row(system: str):
        return summarize_row(system, system, {s: cells(system, s) for s in seeds(system, None)})

    return meta_gap(row(above), row(below))


def final(system: str, seed: int, run: str, key: str) -> float:
    """The last logged value of ``key`` in a run's archived ``train.log``."""
    return parse_log(ARCHIVE / system / f"seed{seed}" / run / LOG_FILE)[key]


def f(x: float) -> str:
    """``16.0``."""
    return f"{x:.1f}"


def s(x: float) -> str:
    """``+16.0``, ``-4.5``, ``0.0``."""
    text = f"{x:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text


def pm(pair: tuple[float, float]) -> str:
    """``+5.6 ± 2.9``: a paired gap and its standard error."""
    return f"{s(pair[0])} ± {f(pair[1])}"


def row_stat(system: str, task: str = "meta") -> str:
    """``73.2 ± 2.6``: a row's mean ± std over its seeds."""
    return f"{f(mean(system, task))} ± {f(std(system, task))}"


def per_seed(system: str, task: str = "meta", of: tuple[int, ...] = SEEDS) -> list[str]:
    return [f(value(system, seed, task)) for seed in of]


def loss(x: float) -> str:
    return f"{x:.2f}"


@cache
def logged(system: str, seed: int, key: str) -> dict[int, float]:
    """Every update's logged training value of ``key`` in a pre-training's archived log."""
    text = (ARCHIVE / system / f"seed{seed}" / "pretrain" / LOG_FILE).read_text(encoding="utf-8")
    return {
        int(update): float(found)
        for update, found in re.findall(
            rf"progress: (\d+)/\d+, train/[^\n]*?{re.escape(key)}: ([0-9.]+)", text
        )
    }


ITM = "train/uvla_image_sentence/uvla_itm"


ALIGNED_ITM = "train/aligned_vlp/uvla_itm"


AT_CHANCE = math.log(2) - 0.02


def learns_from(system: str, seed: int, key: str) -> int:
    """The update from which a pre-training's logged ITM loss stays under ln 2 - 0.02."""
    series = sorted(logged(system, seed, key).items())
    last = max(i for i, (_, v) in enumerate(series) if v >= AT_CHANCE)
    return series[last + 1][0]


def last_mean(system: str, seed: int, key: str, updates: int = 500) -> float:
    """The mean logged value of ``key`` over a pre-training's last ``updates`` updates."""
    series = logged(system, seed, key)
    end = max(series)
    return statistics.fmean(v for update, v in series.items() if update > end - updates)


def weights(system: str, seed: int) -> str:
    """The first 12 hex digits of the weights a pre-training's record says it wrote."""
    import json

    record = ARCHIVE / system / f"seed{seed}" / "pretrain" / "step.json"
    return json.loads(record.read_text(encoding="utf-8"))["weights_sha256"][:12]


def gap_text(above: str, below: str, paper: str) -> str:
    """``+0.8 ± 1.5 over three seeds each (0.5 SE; paired +0.8 ± 1.4, 0.6 SE; paper +2.1)``."""
    found = gap(above, below)
    return (
        f"{s(100 * found.difference)} ± {f(100 * found.stderr)} over three seeds each "
        f"({found.ratio:.1f} SE; paired {pm(paired(above, below))}, "
        f"{found.paired.ratio:.1f} SE; paper {paper})"
    )


def t_text(above: str, below: str) -> str:
    """``(paired t(2) = 0.6, p = 0.63, 95 % CI [-5.4, +7.0]; it detects 8.1 or more``."""
    test = gap(above, below).test
    low, high = (100 * bound for bound in test.interval)
    return (
        f"(paired t({test.df:g}) = {test.t:.1f}, p = {test.p:.2f}, {interval(low, high)}; "
        f"it detects {100 * test.detectable:.1f} or more"
    )


def by_task(
    above: str,
    below: str,
    tasks=("vqa", "nlvr2", "ve", "refcoco"),
    seed: int | None = None,
    of: str = "pm",
) -> list[str]:
    """Per task, ``above`` − ``below``: paired ± SE, or on ``seed`` (``below`` on it, ``above``
    its mean when ``of`` is ``mean``)."""
    if seed is None:
        return [pm(paired(above, below, t)) for t in tasks]
    if of == "mean":
        return [s(mean(above, t) - value(below, seed, t)) for t in tasks]
    return [s(value(above, seed, t) - value(below, seed, t)) for t in tasks]


Quote = Callable[[], str]


def t_p(above: str, below: str) -> str:
    """``t(2) = 18.0, p = 0.003``: the test of a Meta-Ave gap (paired over the shared seeds),
    as the table prints it."""
    from mmf_uvlp.replication.render import format_p

    test = gap(above, below).test
    return f"t({test.df:g}) = {test.t:.1f}, {format_p(test.p)}"


def p_text(above: str, below: str) -> str:
    """``p = 0.003``: the p of the test of a Meta-Ave gap, as the table prints it."""
    from mmf_uvlp.replication.render import format_p

    return format_p(gap(above, below).test.p)


def paired_p_value(above: str, below: str, task: str = "meta") -> float:
    """The two-sided p of the paired t over three seeds of ``above`` − ``below``."""
    from mmf_uvlp.replication.aggregate import t_test

    d, se = paired(above, below, task)
    return t_test("paired", d, se, 2).p


def paired_p(above: str, below: str, task: str = "meta") -> str:
    return f"{paired_p_value(above, below, task):.2f}"


BC, RBC = "uvla_bc", "random_pairs_bc"


def records(budget: bool = False) -> list[dict]:
    """The archived runs' records (``budget``: only those of systems pre-trained for the
    recipe's updates, not a multiple of them)."""
    import json

    from mmf_uvlp.replication.study import SYSTEMS

    return [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(ARCHIVE.glob("*/seed*/*/step.json"))
        if not budget or SYSTEMS[path.parents[2].name].updates == 1
    ]


def backfilled() -> list[dict]:
    """The records given their provenance after the fact (their code's commit unknown)."""
    return [record for record in records() if record.get("made_by_source")]


def option(step: str, key: str) -> str:
    """A command option of the archived runs of ``step`` (``pretrain`` or a task) at the
    recipe's budget: one value in all of them."""
    found = {
        arg.partition("=")[2]
        for record in records(budget=True)
        if any(
            arg.startswith("env.save_dir=") and arg.endswith(f"/{step}")
            for arg in record["command"]
        )
        for arg in record["command"]
        if arg.startswith(f"{key}=")
    }
    assert len(found) == 1, (step, key, found)
    return found.pop()


def world(key: str):
    """A setting of the world every archived run read (one value in all their records)."""
    found = {repr(record["world"][key]) for record in records() if key in record.get("world", {})}
    assert len(found) == 1, (key, found)
    import ast

    return ast.literal_eval(found.pop())


def preset(key: str):
    from mmf_uvlp.toy_world import PRESETS

    return getattr(PRESETS[world("preset")], key)


def run_minutes(system: str, seed: int, run: str) -> float:
    """A run's recorded wall time (its ``step.json``'s ``wall_s``) in minutes."""
    import json

    record = ARCHIVE / system / f"seed{seed}" / run / "step.json"
    return json.loads(record.read_text(encoding="utf-8"))["wall_s"] / 60


def rest(system: str, seed: int) -> float:
    """The minutes of a seed's runs after its pre-training (fine-tunings, split inference)."""
    return sum(
        run_minutes(system, seed, path.parent.name)
        for path in (ARCHIVE / system / f"seed{seed}").glob("*/step.json")
        if path.parent.name != "pretrain"
    )


def hm(minutes: float) -> str:
    """``1 h 30 min``."""
    whole = round(minutes)
    return f"{whole // 60} h {whole % 60} min"


def unit_text(system: str, seed: int, rest_name: str) -> str:
    """``1 h 30 min ... pre-training 41.9 min, <rest_name> 48.4 min``."""
    pre, after = run_minutes(system, seed, "pretrain"), rest(system, seed)
    return f"{hm(pre + after)}", f"pre-training {pre:.1f} min", f"{rest_name} {after:.1f} min"


def hours_of(units: list[tuple[str, int]], runs_of: Callable[[str, int], list[str]]) -> float:
    return (
        sum(
            run_minutes(system, seed, run)
            for system, seed in units
            for run in runs_of(system, seed)
        )
        / 60
    )


def after_pretrain(system: str, seed: int) -> list[str]:
    return [
        path.parent.name
        for path in (ARCHIVE / system / f"seed{seed}").glob("*/step.json")
        if path.parent.name != "pretrain"
    ]


def seed_list(ks) -> str:
    """``0, 1 and 2``."""
    ks = [str(k) for k in ks]
    return ", ".join(ks[:-1]) + f" and {ks[-1]}" if len(ks) > 1 else ks[0]


ROUND_ROBIN, JOINT = "round_robin", "true_pairs_0"


def lower_on(above: str, below: str, task: str = "meta") -> str:
    """``every seed`` or ``seeds 0 and 1``: the shared seeds on which ``above`` reads below
    ``below``."""
    shared = shared_seeds(above, below, task)
    lower = [k for k in shared if value(above, k, task) < value(below, k, task)]
    return "every seed" if lower == shared else "seeds " + seed_list(lower)


def interval_half_width(values: list[float]) -> float:
    """Half the 95 % t prediction interval of one more draw of ``values``,
    t(0.975, n - 1) x s x sqrt(1 + 1/n)."""
    from scipy import stats

    n = len(values)
    return float(stats.t.ppf(0.975, n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n))


def prediction_half_width(system: str) -> float:
    """Half the 95 % prediction interval of one more seed of ``system``'s Meta-Ave, in points."""
    return interval_half_width([value(system, seed) for seed in seeds(system)])


def inside(x: float, system: str) -> bool:
    """Whether ``x`` lies in the 95 % prediction interval of ``system``'s next seed."""
    return abs(x - mean(system)) <= prediction_half_width(system)


NOISY = "link_noise25"


NOISIER = "link_noise50"


UVLA_2X, ALIGNED_2X = "uvla_2x", "aligned_vlp_2x"


def curriculum_on(system: str, seed: int) -> int:
    """The update from which a pre-training's log says the curriculum weights its losses."""
    text = (ARCHIVE / system / f"seed{seed}" / "pretrain" / LOG_FILE).read_text(encoding="utf-8")
    return int(re.search(r"curriculum: on from update (\d+)", text).group(1))


def last_share(system: str, seed: int, key: str) -> float:
    """The share of a pre-training's schedule from the update its ITM learns from, in %."""
    return 100 * (1 - learns_from(system, seed, key) / max(logged(system, seed, key)))


def itm_final(system: str, seed: int) -> float:
    """A pre-training's last validation ITM loss (Aligned VLP's pairs, μ-VLA's I-S pairs)."""
    pairs = "aligned_vlp" if system.startswith("aligned_vlp") else "uvla_image_sentence"
    return final(system, seed, "pretrain", f"val/{pairs}/uvla_itm")


def aligned_itm_share() -> float:
    """The most of its 5,000-update schedule Aligned VLP's ITM learns in over the seeds, in %."""
    return max(last_share("aligned_vlp", k, ALIGNED_ITM) for k in SEEDS)


def lead(uvla: str = "uvla", aligned: str = "aligned_vlp") -> float:
    """μ-VLA's Meta-Ave over Aligned VLP's on seed 0, the seed the budget rows share."""
    return value(uvla, 0) - value(aligned, 0)


# References, not measurements: table and seed numbers, the df of a test, named objects.
STRUCTURAL = re.compile(
    r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|Tables? \d(?: and \d)?|"
    r"(?i:seeds?) \d(?:(?:, | and )\d)*|seed-\d|t\(\d\)|\bdf = \d|R-T \+ R-N|"
    r"[A-Za-z_]\d|\d[A-Za-z]|\(ln 2\)"
)


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def trivial(column: str) -> str:
    """The published Table 1's trivial rate of ``column`` (test_published_tables ties it to
    the world)."""
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| System | VQA"))
    titles = [c.strip() for c in lines[header].strip("|").split("|")]
    row = next(line for line in lines[header:] if line.startswith("| *Trivial"))
    return [c.strip() for c in row.strip("|").split("|")][titles.index(column)]


def normal(text: str) -> str:
    """Whitespace collapsed, the typographic minus as ``-``."""
    return " ".join(text.replace("−", "-").split())


def section(text: str, heading: str) -> str:
    """The prose under the heading ``heading`` up to the next heading or code block."""
    lines = text.splitlines()
    start = (
        next(
            i
            for i, line in enumerate(lines)
            if line.lstrip("#") != line and line.lstrip("#").strip() == heading
        )
        + 1
    )
    end = next(
        (i for i in range(start, len(lines)) if lines[i].startswith(("#", "```"))), len(lines)
    )
    return "\n".join(lines[start:end])


Readings = dict[str, tuple[list[Quote], list[str]]]  # heading: (quotes, numbers from elsewhere)


def problems(text: str, readings: Readings) -> list[str]:
    """What in the sections ``readings`` names of ``text`` (a results.md) does not read as the
    archive gives it: a quote the section lacks, or a number that is neither a quote nor
    listed as from elsewhere."""
    found = []
    for heading, (quotes, elsewhere) in readings.items():
        prose = normal(section(text, heading))
        for quote in quotes:
            expected = normal(quote())
            if expected not in prose:
                found.append(
                    f"{RESULTS.name}, {heading}: the archive gives {expected!r}, not on the page"
                )
            prose = prose.replace(expected, " ")
        for known in elsewhere:
            if normal(known) not in prose:
                found.append(
                    f"{RESULTS.name}, {heading}: {known!r} (a number from elsewhere) "
                    "is not on the page"
                )
            prose = prose.replace(normal(known), " ")
        prose = STRUCTURAL.sub(" ", prose)
        for match in NUMBER.finditer(prose):
            context = prose[max(0, match.start() - 40) : match.end() + 40]
            found.append(
                f"{RESULTS.name}, {heading}: {match.group()} is neither computed from "
                f"the archive nor listed with its source: ...{context}..."
            )
    return found


# ----------------------------------------------------------------------------- the tests


def archived_systems() -> list[str]:
    """The systems the archive holds runs of."""
    return sorted(path.name for path in ARCHIVE.iterdir() if any(path.glob("seed*/")))


@cache
def pooled_sd() -> tuple[float, int, int]:
    """A Meta-Ave's seed-to-seed standard deviation pooled over the archive's rows with two
    seeds or more, sum((n - 1) s²) / sum(n - 1), in points; its df and the number of rows."""
    rows = [
        (len(seeds(system)), std(system)) for system in archived_systems() if len(seeds(system)) > 1
    ]
    df = sum(n - 1 for n, _ in rows)
    return math.sqrt(sum((n - 1) * sd**2 for n, sd in rows) / df), df, len(rows)


def pooled_test(above: str, below: str, above_seed: int | None = 0) -> tuple[float, ...]:
    """(difference, t, p, low, high) of above's Meta-Ave (its seed ``above_seed``; None: its
    mean) minus below's mean, read against :func:`pooled_sd`: SE = s sqrt(1/n1 + 1/n2)."""
    from scipy import stats

    sd, df, _ = pooled_sd()
    if above_seed is None:
        difference, n_above = mean(above) - mean(below), len(seeds(above))
    else:
        difference, n_above = value(above, above_seed) - mean(below), 1
    stderr = sd * math.sqrt(1 / n_above + 1 / len(seeds(below)))
    t = difference / stderr
    half = stats.t.ppf(0.975, df) * stderr
    return difference, t, 2 * stats.t.sf(abs(t), df), difference - half, difference + half


def interval(low: float, high: float) -> str:
    """``95 % CI [+12.2, +19.9]`` (points)."""
    return f"95 % CI [{s(low)}, {s(high)}]"


def ci(above: str, below: str) -> str:
    """The 95 % confidence interval of a paired Meta-Ave gap, as the table prints it."""
    test = gap(above, below).test
    return interval(*(100 * bound for bound in test.interval))


def p_of(above: str, below: str) -> float:
    """The p of the test a table reads above − below by: paired over two shared seeds or
    more, else against the pooled spread (one seed of ``above`` or of ``below``)."""
    if len(shared_seeds(above, below)) > 1:
        return gap(above, below).test.p
    if len(seeds(above)) == 1:
        return pooled_test(above, below)[2]
    return pooled_test(below, above)[2]


def holm_p(table: str, above: str, below: str) -> str:
    """Holm's p of the ordering above − below over the orderings of ``table`` (a key of the
    study's tables), as the table prints it."""
    from mmf_uvlp.replication.render import format_p
    from mmf_uvlp.replication.significance import holm
    from mmf_uvlp.replication.study import TABLES

    pairs = [
        (o.above, o.below) for o in TABLES[table].orderings if seeds(o.above) and seeds(o.below)
    ]
    adjusted = holm([p_of(a, b) for a, b in pairs])
    return format_p(adjusted[pairs.index((above, below))])
