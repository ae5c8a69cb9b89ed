"""The front door (``uvlp``, ``python -m mmf_uvlp``): the run configs that ``mmf_run`` takes,
a line each, the ``uvlp-*`` tools, and where to read on.

Each run config's line is the first sentence of its opening comment; each tool's, that of
its module's docstring (read from the source, so a tool whose libraries are missing, e.g.
detectron2, is still listed). Shared includes (``*defaults.yaml``, ``toy_world.yaml``) are
not run configs and are left out.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shutil
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmf_uvlp.utils.config_files import home

SHARED_INCLUDES = ("toy_world.yaml",)
WIDTH = 100

START = """\
mmf_uvlp: unsupervised vision-and-language pre-training (μ-VLA and its baselines) for MMF.

Start (README.md, Quick start):
  make toy-world corpus                            the demo world and its weakly aligned corpus
  mmf_run config=projects/uvla/pretrain.yaml       pre-train μ-VLA: save/uvla_pretrain/
  mmf_run config=projects/uvla/finetune/vqa2.yaml  fine-tune it on VQA2: save/uvla_vqa2/
  export PRESET=tiny                               every line above on the tiny world, in minutes
"""

MORE = """\
More: README.md; docs/ (mmf.md: the MMF side, own-data.md: your data, replication.md: the
study); `mmf_run config=<run config> <key>=<value> ...` runs one (MMF's own --help: mmf_run
--help); `<tool> --help` for a tool.
"""


def first_sentence(text: str, width: int) -> str:
    """The first sentence of ``text`` (its lines joined), cut at a word to ``width``."""
    joined = " ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    match = re.search(r"[.!?](\s+[A-Z(]|$)", joined)
    sentence = joined[: match.start()] if match else joined.rstrip(".")
    if len(sentence) <= width:
        return sentence
    return sentence[: width - 1].rsplit(" ", 1)[0] + "…"


def _opening_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
        if not lines[-1]:
            break
    return "\n".join(lines)


def run_configs(root: Path) -> Dict[str, List[Tuple[str, str]]]:
    """Every run config under ``root/projects``, by folder (``projects/uvla/``, ...): its
    path below that folder and its opening comment."""
    found: Dict[str, List[Tuple[str, str]]] = {}
    for path in sorted((root / "projects").rglob("*.yaml")):
        if path.name.endswith("defaults.yaml") or path.name in SHARED_INCLUDES:
            continue
        relative = path.relative_to(root / "projects")
        folder = f"projects/{relative.parts[0]}/"
        found.setdefault(folder, []).append(
            (relative.relative_to(relative.parts[0]).as_posix(), _opening_comment(path))
        )
    return found


def tools() -> List[Tuple[str, str]]:
    """``(console script, line)`` of the plugin's installed ``uvlp-*`` tools."""
    found = []
    for script in entry_points(group="console_scripts"):
        module = script.value.split(":")[0]
        if not module.startswith("mmf_uvlp.") or not script.name.startswith("uvlp-"):
            continue
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
        found.append((script.name, ast.get_docstring(ast.parse(source)) or ""))
    return sorted(set(found))


def _table(rows: Iterable[Tuple[str, str]], width: int, indent: str = "  ") -> List[str]:
    rows = list(rows)
    left = max((len(name) for name, _ in rows), default=0) + 2
    room = max(width - len(indent) - left, 30)
    return [f"{indent}{name.ljust(left)}{first_sentence(text, room)}" for name, text in rows]


def render(root: Optional[Path] = None, width: int = WIDTH) -> str:
    """The overview as printed, ``width`` columns wide."""
    root = home() if root is None else root
    configs = run_configs(root)
    listed = tools()
    count = sum(len(rows) for rows in configs.values())
    lines = [START, f"Run configs ({count}; mmf_run config=<folder><path>, in {root}):"]
    for folder, rows in configs.items():
        lines += [f"  {folder}", *_table(rows, width, indent="    ")]
    lines += ["", f"Tools ({len(listed)}; each with --help):"]
    lines += _table(listed, width)
    lines += ["", MORE]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="uvlp", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    width = max(80, min(shutil.get_terminal_size((WIDTH, 24)).columns, 140))
    sys.stdout.write(render(width=width))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
