"""Every command of the README's and the docs' ``bash`` / ``sh`` / ``console`` blocks is run
as written or checked to parse.

Each command line (continuation lines joined, comments dropped, ``&&`` chains split) is
handled by the first rule that takes it:

- ``RUN``: cheap commands run literally, in order, from a folder that holds this checkout's
  files and an empty ``data/`` (what they write stays out of the checkout);
- ``make``: ``make -n`` with the same targets and variables (the Makefile parses, the
  targets exist; nothing runs);
- a Python tool (a console script of ``pyproject.toml``, ``python -m mmf_uvlp.cli.<tool>``
  or ``python tools/...``): its own
  argparse parses the arguments, and the tool stops right after (nothing runs);
- ``mmf_run`` (also under ``torchrun``, and ``mmf_predict`` with the override it appends):
  MMF composes the config with the overrides, which
  refuses a config file that does not exist and a key the merged config lacks (``...`` and
  ``<placeholder>`` stand for what the reader fills in);
- ``pip``: pip's own parser takes the command;
- ``PARSE_ONLY``: a short list of commands that cannot run here, each with its reason.

``docs/own-data.md`` is run block by block by ``tests/e2e/test_own_data_walkthrough.py``. A
command no rule takes fails :func:`test_every_doc_command_has_a_rule`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO, fork_server
from helpers.docs import FENCE, logical_lines as _logical_lines


BIN = Path(sys.executable).parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_ELSEWHERE = {"docs/own-data.md": "tests/e2e/test_own_data_walkthrough.py runs its every block"}
# Values of the shell variables the docs leave to the reader (cluster nodes, shards).
# The project's console scripts (name -> "module:function"), parsed as the tools are.
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
READER_VARIABLES = {
    "NODE": "0",
    "HEAD": "localhost",
    "i": "0",
    "N": "2",
    "CONDA_PREFIX": "/opt/conda",
}

# Cheap commands run as written (from a folder with this checkout's files and an empty data/).
RUN = (
    "uvlp-make-toy-world --preset tiny --seed 0 --out data/toy_world_tiny",
    "uvlp-make-toy-world --preset tiny --out data/toy_world_tiny",
    "uvlp-replicate --plan",
    "uvlp-build-corpus run --predictions data/toy_world_tiny/detections/cc/predictions.tsv "
    "--features data/toy_world_tiny/detections/cc/features.tsv --corpus "
    "data/toy_world_tiny/text/caption_corpus.txt data/toy_world_tiny/text/narrative_corpus.txt "
    "--captions-gt data/toy_world_tiny/text/captions_gt.tsv "
    "--objects-gt data/toy_world_tiny/images_gt/cc.jsonl --out data/toy_world_tiny/corpus",
)

# Commands that are only parsed here, with the reason; they keep to their rule's check
# where they have one, the others (no rule) only must still be in the docs.
PARSE_ONLY = {
    "module load pytorch": "an environment-modules command of a cluster",
    "source .venv/bin/activate": "changes the shell that runs it; tests/e2e/test_quick_start.py "
    "runs the Quick start in a fresh login shell",
    "pip freeze | grep -v -e '^-e ' -e ' @ ' > pins.txt": "writes the environment's pins (a pipe into a file); pip freeze is parsed",
}


@dataclass(frozen=True)
class DocCommand:
    """One command line of a page: where it is and its text (comments dropped)."""

    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def doc_commands() -> list[DocCommand]:
    """Every command of every page's command blocks (``&&`` chains split), in page order."""
    commands = []
    for page in PAGES:
        name = str(page.relative_to(REPO))
        if name in RUN_ELSEWHERE:
            continue
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            first = text.count("\n", 0, match.start(1)) + 1
            for offset, line in _logical_lines(match.group(1)):
                for part in line.split(" && "):
                    commands.append(DocCommand(name, first + offset, part.strip()))
    return commands


def _assignment(text: str) -> str | None:
    match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(\S.*)", text)
    return match.group(1) if match and " " not in match.group(2).split("$(")[0] else None


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(READER_VARIABLES)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _argv(text: str, env: dict[str, str]) -> list[str]:
    """``text`` split by the shell (variables and ``$(...)`` expanded, no globbing), with
    ``<placeholder>`` as ``PLACEHOLDER`` (``<checkout>`` as this checkout) and ``...`` dropped
    (``mmf_run ...`` stands for any command: there the pre-training's)."""
    text = re.sub(
        r"<[^<>]+>", lambda m: str(REPO) if m.group() == "<checkout>" else "PLACEHOLDER", text
    )
    result = subprocess.run(
        ["bash", "-c", 'set -f; eval "set -- $1"; printf "%s\\0" "$@"', "bash", text],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, f"{text}: {result.stderr}"
    argv = result.stdout.split("\0")[:-1]
    if argv[:2] == ["mmf_run", "..."]:
        argv[1] = "config=projects/uvla/pretrain.yaml"
    return [arg for arg in argv if arg != "..."]


def _module_script(argv: list[str]) -> str | None:
    """The console script of ``python -m mmf_uvlp.cli.<tool>`` (None for another module)."""
    target = f"{argv[2]}:main" if len(argv) > 2 else None
    return next((name for name, value in SCRIPTS.items() if value == target), None)


def _rule(command: DocCommand, argv: list[str]) -> str | None:
    if command.text in RUN:
        return "run"
    if command.text in PARSE_ONLY:
        return "listed"
    program = Path(argv[0]).name
    if program == "make":
        return "make"
    if program in ("python", "python3") and len(argv) > 1 and argv[1].endswith(".py"):
        return "tool"
    if program in ("python", "python3") and argv[1:2] == ["-m"] and _module_script(argv):
        return "tool"
    if program in SCRIPTS:
        return "tool"
    if program in ("mmf_run", "mmf_predict", "torchrun"):
        return "mmf_run"
    if program == "pip":
        return "pip"
    if _assignment(command.text):
        return "assignment"
    return None


def _classified() -> list[tuple[DocCommand, list[str], str | None]]:
    env, out = _environment(), []
    for command in doc_commands():
        name = _assignment(command.text)
        if name:  # a variable the page's next commands use
            value = subprocess.run(
                ["bash", "-c", f'{command.text}; printf "%s" "${name}"'],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            env[name] = value.stdout
            out.append((command, [], "assignment"))
            continue
        argv = _argv(command.text, env) if command.text not in PARSE_ONLY else []
        out.append(
            (command, argv, _rule(command, argv) if argv or command.text in PARSE_ONLY else None)
        )
    return out


CLASSIFIED = _classified()


def _of(rule: str) -> list[tuple[DocCommand, list[str]]]:
    return [(command, argv) for command, argv, found in CLASSIFIED if found == rule]


def test_every_doc_command_has_a_rule():
    """A command added to a page that no rule takes fails here (add it to RUN or to a rule's
    check, or to PARSE_ONLY with its reason); the lists name only commands still in the docs."""
    assert len(CLASSIFIED) > 50  # the blocks were found
    unhandled = [str(command) for command, _, rule in CLASSIFIED if rule is None]
    assert not unhandled, "\n".join(unhandled)
    texts = {command.text for command, _, _ in CLASSIFIED}
    assert not [text for text in (*RUN, *PARSE_ONLY) if text not in texts]
    for page, test in ((p, t.split()[0]) for p, t in RUN_ELSEWHERE.items()):
        assert (REPO / page).exists() and (REPO / test).exists()
        assert page in (REPO / test).read_text(encoding="utf-8").replace('"docs" / "', "docs/")


def test_the_extraction_joins_continuations_and_splits_chains():
    block = textwrap.dedent("""\
        # a comment line
        python tools/x.py --a 1 \\
            --b "two words"   # trailing comment
        HOLDOUT=$(for d in a b; do
                  echo --o $d; done)
        module load m && make setup
        """)
    assert _logical_lines(block) == [
        (1, 'python tools/x.py --a 1 --b "two words"'),
        (3, "HOLDOUT=$(for d in a b; do echo --o $d; done)"),
        (5, "module load m && make setup"),
    ]
    assert _argv('a "b c" $(echo d) <x y> ...', _environment()) == ["a", "b c", "d", "PLACEHOLDER"]


def test_make_commands_name_targets_and_variables_the_makefile_takes():
    """``make -n``: the Makefile parses with the variables and every target exists."""
    commands = _of("make")
    assert commands
    for command, argv in commands:
        result = subprocess.run(
            ["make", "-n", *argv[1:]],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=_environment(),
            timeout=120,
        )
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"


PARSE_TOOL = textwrap.dedent("""\
    import argparse, runpy, sys

    class Parsed(BaseException):
        pass

    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        original(self, args, namespace)
        raise Parsed()

    argparse.ArgumentParser.parse_args = parse_args
    sys.argv = sys.argv[1:]
    try:
        if sys.argv[0].endswith(".py"):
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:  # a console script: module:function
            module, function = sys.argv[0].split(":")
            sys.exit(getattr(__import__(module, fromlist=[function]), function)())
    except Parsed:
        print("PARSED")
        sys.exit(0)
    sys.exit("the tool finished without parsing its arguments")
    """)


@pytest.mark.slow
def test_tool_commands_parse_with_the_tools_own_argparse():
    """Each ``python tools/...`` or console-script command's arguments pass the tool's parser
    (the tool stops right after parsing: nothing is built, trained or read)."""
    commands = _of("tool")
    assert commands
    failed = []
    for command, argv in commands:  # each in a child of the fork server: imports paid once
        if argv[1:2] == ["-m"]:  # python -m mmf_uvlp.cli.<tool>: its console script
            argv = [_module_script(argv), *argv[3:]]
        program = [SCRIPTS[argv[0]]] if argv[0] in SCRIPTS else argv[1:2]
        tool = [*program, *argv[1 + (argv[0] not in SCRIPTS) :]]
        result = fork_server().run(["-c", PARSE_TOOL, *tool], env=_environment(), cwd=REPO)
        if result["returncode"] != 0 or "PARSED" not in result["output"]:
            failed.append(f"{command}\n    {result['output'].strip().splitlines()[-1:]}")
    assert not failed, "\n".join(failed)


COMPOSE = textwrap.dedent("""\
    import argparse, json, sys
    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    errors = []
    for opts in json.loads(sys.argv[1]):
        registry.register("config", None)
        try:
            Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
            errors.append(None)
        except BaseException as e:  # noqa: B902 - MMF exits on a missing config file
            errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps(errors))
    """)


def _mmf_options(argv: list[str]) -> list[str]:
    """The ``mmf_run`` options of ``argv`` (after ``torchrun``'s own, checked by its parser)."""
    if Path(argv[0]).name == "torchrun":
        from torch.distributed.run import get_args_parser

        parsed = get_args_parser().parse_args(argv[1:])
        assert Path(parsed.training_script).name == "mmf_run", argv
        return parsed.training_script_args
    if Path(argv[0]).name == "mmf_predict":  # MMF's mmf_cli.predict appends it
        return [*argv[1:], "evaluation.predict=true"]
    return argv[1:]


@pytest.mark.slow
def test_mmf_run_commands_name_configs_and_keys_mmf_composes():
    """MMF composes every ``mmf_run`` command's config with its overrides: the config files
    exist and every override names a key of the merged config (MMF refuses others)."""
    commands = _of("mmf_run")
    assert commands
    options = [_mmf_options(argv) for _, argv in commands]
    result = subprocess.run(
        [sys.executable, "-c", COMPOSE, json.dumps(options)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    failed = [f"{command}\n    {error}" for (command, _), error in zip(commands, errors) if error]
    assert not failed, "\n".join(failed)


def test_pip_commands_pass_pips_parser_and_name_this_version():
    from pip._internal.commands import create_command

    commands = _of("pip")
    assert commands
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(
        1
    )
    for command, argv in commands:
        pip = create_command(argv[1])
        options, args = pip.parse_args(argv[2:])
        for wheel in (a for a in args if a.endswith(".whl")):
            assert Path(wheel).name.startswith(f"mmf_uvlp-{version}-"), command
    for text in PARSE_ONLY:  # the listed pip pipelines: their pip part
        if text.startswith("pip "):
            create_command(text.split()[1]).parse_args(text.split("|")[0].split()[2:])


def _checkout_copy(tmp_path: Path) -> Path:
    """A folder with this checkout's files (linked) and an empty ``data/``."""
    root = tmp_path / "checkout"
    root.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("data", ".git"):
            (root / entry.name).symlink_to(entry)
    (root / "data").mkdir()
    return root


@pytest.mark.slow
def test_cheap_commands_run_as_written(tmp_path):
    """The commands of ``RUN``, as the docs write them, in the docs' order; each page's from
    its own folder (a reader follows one page)."""
    ran, roots = [], {}
    for command, argv in _of("run"):
        if command.page not in roots:
            roots[command.page] = _checkout_copy(tmp_path / str(len(roots)))
        result = subprocess.run(
            argv,
            cwd=roots[command.page],
            capture_output=True,
            text=True,
            env=_environment(),
            timeout=600,
        )
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
        ran.append(command.text)
    assert sorted(set(ran)) == sorted(RUN)
    corpus = roots["docs/corpus.md"] / "data" / "toy_world_tiny" / "corpus"
    assert list((corpus / "annotations").glob("part-*.jsonl.gz"))
    assert (corpus / "report" / "report.md").is_file()
    assert (roots["docs/toy_world.md"] / "data" / "toy_world_tiny" / "world.json").is_file()
