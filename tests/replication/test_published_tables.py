"""The published tables against the committed archive: every table of docs/results.md is
printed again from the archive by the command written above it (`replicate --recorded`),
and compared with the page cell by cell, with every line printed under it (gaps, the
paper's orderings, what made the runs); the README's table of the same header row cell by
cell too. A metric changed in the archive shows as a difference.

The trivial rates are read from the world: without `data/toy_world_<preset>` (what `make
demo` or `--recorded` generates) the tables are rebuilt on a folder that holds only the
world's `world.json`, their trivial row is left out of the comparison, and
`test_the_trivial_rates_match_the_world` is skipped, saying why.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from mmf_uvlp.replication.recipe import Recipe, load_recipe
from mmf_uvlp.replication.study import TABLES
from mmf_uvlp.tasks import TASKS
from mmf_uvlp.report.table import TRIVIAL_LABEL
from mmf_uvlp.toy_world import PRESETS
from mmf_uvlp.cli import replicate

from helpers import REPO


RESULTS = REPO / "docs" / "results.md"
README = REPO / "README.md"
TRIVIAL = f"*{TRIVIAL_LABEL}*"

Table = list[list[str]]  # the header row, then the rows, each a list of cells


def table_rows(lines: list[str]) -> Table:
    """The cells of a markdown table's lines (the separator row left out)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    return [row for row in rows if not all(re.fullmatch(r":?-+:?", cell) for cell in row)]


def markdown_tables(text: str) -> list[Table]:
    """Every table of a markdown text, in order."""
    tables, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            tables.append(table_rows(block))
            block = []
    return tables


@dataclass(frozen=True)
class Published:
    """A table of docs/results.md: the command above it and the lines printed under it."""

    args: list[str]
    lines: list[str]  # the table's lines and every line after it up to the next heading

    @property
    def table(self) -> Table:
        return table_rows([line for line in self.lines if line.startswith("|")])


def published(path: Path = RESULTS) -> list[Published]:
    """Each ```` ``` ```` block of ``path`` that runs `uvlp-replicate ... --recorded`,
    with the lines after it up to the next heading or block."""
    lines, found, index = path.read_text(encoding="utf-8").splitlines(), [], 0
    while index < len(lines):
        if not lines[index].startswith("```"):
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        command = shlex.split(" ".join(line.rstrip("\\") for line in lines[index + 1 : end]))
        index = end + 1
        if "uvlp-replicate" not in command or "--recorded" not in command:
            continue
        after = []
        while index < len(lines) and not lines[index].startswith(("#", "```")):
            after.append(lines[index])
            index += 1
        start = next((i for i, line in enumerate(after) if line.startswith("|")), None)
        assert start is not None, f"{path}: no table after `{' '.join(command)}`"
        found.append(
            Published(
                command[command.index("uvlp-replicate") + 1 :],
                [line for line in after[start:] if line.strip()],
            )
        )
    return found


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def rebuild(item: Published, tmp_path: Path, archive: Path | None = None) -> tuple[list[str], bool]:
    """The lines `uvlp-replicate` prints for ``item``'s table from a copy of its archive
    (or ``archive``), from the table on, and whether the world was at hand (else its trivial
    row is empty)."""
    args = list(item.args)
    tables = (_option(args, "--tables") or "").split(",")
    assert len(tables) == 1 and tables[0] in TABLES, (
        f"{RESULTS}: `{' '.join(args)}`: expected --tables with one table"
    )
    source = _option(args, "--archive")
    assert source is not None, f"{RESULTS}: `{' '.join(args)}` names no --archive"
    copy = tmp_path / "archive"
    shutil.copytree(archive or REPO / source, copy)
    args[args.index("--archive") + 1] = str(copy)
    recipe = (
        load_recipe(REPO / _option(args, "--recipe"), TASKS) if "--recipe" in args else Recipe()
    )
    preset = _option(args, "--world") or recipe.world or "demo"
    world = REPO / "data" / f"toy_world_{preset}"
    has_world = (world / "world.json").is_file()
    extra = ["--data", str(REPO / "data")]
    if not has_world:  # the world's settings without its data: no trivial rates
        world = tmp_path / f"toy_world_{preset}"
        world.mkdir()
        (world / "world.json").write_text(
            json.dumps({"preset": preset, "feature_dim": PRESETS[preset].feature_dim})
        )
        extra = ["--world", str(world)]
    out = tmp_path / "out"
    code = replicate.main([*args, *extra, "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert code == 0, f"`{' '.join(item.args)}` exited with {code}"
    text = (out / f"{TABLES[tables[0]].stem}.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("|"))
    return [line for line in text[start:] if line.strip()], has_world


def table_differences(where: str, page: Table, printed: Table, trivial: bool) -> list[str]:
    """How a table of a page differs from the printed one, cell by cell (``trivial``: compare
    the trivial row too); rows are matched by label and each printed row must be there."""
    if page[0] != printed[0]:
        return [f"{where}: header {page[0]}, printed {printed[0]}"]
    differences = []
    rows = {row[0]: row for row in printed[1:]}
    labels = [row[0] for row in page[1:]]
    for label in rows:
        if label not in labels:
            differences.append(f"{where}: row {label} is printed but not on the page")
    if [label for label in labels if label in rows] != [label for label in rows if label in labels]:
        differences.append(f"{where}: rows in the order {labels}, printed {list(rows)}")
    for row in page[1:]:
        if row[0] not in rows:
            differences.append(f"{where}: row {row[0]} is on the page but not printed")
            continue
        if len(row) != len(page[0]):
            differences.append(
                f"{where}: row {row[0]} has {len(row)} cells, the header {len(page[0])}"
            )
            continue
        if row[0] == TRIVIAL and not trivial:
            continue
        for column, mine, theirs in zip(page[0][1:], row[1:], rows[row[0]][1:]):
            if mine != theirs:
                differences.append(
                    f"{where}: {row[0]}, {column}: the page has {mine!r}, "
                    f"the archive gives {theirs!r}"
                )
    return differences


def printed_table(lines: list[str]) -> Table:
    return table_rows([line for line in lines if line.startswith("|")])


def differences(item: Published, printed: list[str], has_world: bool) -> list[str]:
    """How a published table and the lines under it differ from those printed again."""
    where = f"{RESULTS.name} `{' '.join(item.args)}`"
    found = table_differences(where, item.table, printed_table(printed), has_world)

    def text(lines: list[str]) -> list[str]:
        """Every line but the table's (and, without the world, the trivial Meta-Ave's note)."""
        return [
            line
            for line in lines
            if not line.startswith("|") and (has_world or not line.startswith("- Trivial"))
        ]

    page, again = text(item.lines), text(printed)
    found += [f"{where}: printed, not on the page: {line}" for line in again if line not in page]
    found += [f"{where}: on the page, not printed: {line}" for line in page if line not in again]
    return found


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> list[tuple[Published, list[str], bool]]:
    items = published()
    assert items, f"{RESULTS}: no `uvlp-replicate ... --recorded` block with a table"
    return [(item, *rebuild(item, tmp_path_factory.mktemp("table"))) for item in items]


def test_the_published_tables_are_those_the_archive_prints(rebuilt):
    found = [
        line
        for item, printed, has_world in rebuilt
        for line in differences(item, printed, has_world)
    ]
    assert not found, "\n".join(found)


def test_the_readme_table_is_the_published_one(rebuilt):
    """The README's table with the header row of a published table: each of its rows is
    the one the archive prints (its trivial row: the one docs/results.md publishes)."""
    headers = [item.table[0] for item, _, _ in rebuilt]
    tables = [t for t in markdown_tables(README.read_text(encoding="utf-8")) if t[0] in headers]
    assert len(tables) == 1, (
        f"{README}: expected one table with the header row of a table "
        f"of {RESULTS.name}, found {len(tables)}"
    )
    readme = tables[0]
    labels = {row[0] for row in readme[1:]}
    matches = [
        (item, printed, has_world)
        for item, printed, has_world in rebuilt
        if item.table[0] == readme[0] and labels <= {row[0] for row in item.table[1:]}
    ]
    assert matches, f"{README}: no table of {RESULTS.name} has the rows {sorted(labels)}"
    item, printed, has_world = matches[0]
    again = printed_table(printed)
    found = table_differences(
        README.name, readme, [again[0], *(row for row in again[1:] if row[0] in labels)], has_world
    )
    trivial = [row for row in readme if row[0] == TRIVIAL]
    if trivial != [row for row in item.table if row[0] == TRIVIAL]:
        found.append(f"{README.name}: trivial row {trivial}, not {RESULTS.name}'s")
    assert not found, "\n".join(found)


def test_the_trivial_rates_match_the_world(rebuilt):
    missing = [item for item, _, has_world in rebuilt if not has_world]
    if missing:
        pytest.skip(
            f"{len(missing)} of {len(rebuilt)} published tables: no generated world "
            "in data/ to read their trivial rates from (`make demo` or "
            "`replicate --recorded` makes it); their trivial rows were not compared"
        )
    found = [
        line
        for item, printed, _ in rebuilt
        for line in table_differences(RESULTS.name, item.table, printed_table(printed), True)
    ]
    assert not found, "\n".join(found)


def test_a_metric_changed_in_the_archive_shows_as_a_difference(rebuilt, tmp_path):
    """The check above can fail: the first published table's archive with the VQA test
    metric of one run set to 0.01 prints a table that differs from the page in that row's
    VQA cell and Meta-Ave."""
    item = rebuilt[0][0]
    archive = tmp_path / "changed"
    shutil.copytree(REPO / _option(item.args, "--archive"), archive)
    log = sorted(archive.rglob("vqa2/train.log"))[0]
    text = log.read_text(encoding="utf-8")
    changed = re.sub(r"(test/vqa2/vqa_accuracy: )[0-9.]+", r"\g<1>0.0100", text)
    assert changed != text
    log.write_text(changed, encoding="utf-8")
    label = next(
        label
        for label, system in TABLES[_option(item.args, "--tables")].rows
        if system == log.parents[2].name
    )
    printed, has_world = rebuild(item, tmp_path / "build", archive)
    page = next(row for row in item.table if row[0] == label)
    again = next(row for row in printed_table(printed) if row[0] == label)
    assert page[1] != again[1]
    found = differences(item, printed, has_world)
    assert any(
        line.endswith(f": {label}, VQA: the page has {page[1]!r}, the archive gives {again[1]!r}")
        for line in found
    ), "\n".join(found)
    assert any(f": {label}, Meta-Ave: the page has" in line for line in found)
