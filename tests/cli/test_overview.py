"""The front door: ``uvlp`` (and ``python -m mmf_uvlp``) lists every run config of
``projects/`` with its line and every ``uvlp-*`` console script of ``pyproject.toml``."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from helpers import REPO

UVLP = str(Path(sys.executable).with_name("uvlp"))


def _printed(*argv: str) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_uvlp_lists_every_run_config_with_its_line_and_every_tool():
    printed = _printed(UVLP)
    shared = {"defaults.yaml", "finetune_defaults.yaml", "toy_world.yaml"}
    configs = [p for p in sorted((REPO / "projects").rglob("*.yaml")) if p.name not in shared]
    assert f"Run configs ({len(configs)};" in printed
    lines = printed.splitlines()
    for path in configs:
        folder, below = (
            path.relative_to(REPO / "projects").parts[0],
            path.relative_to(REPO / "projects" / path.relative_to(REPO / "projects").parts[0]),
        )
        assert f"  projects/{folder}/" in lines, folder
        line = next((l for l in lines if l.strip().startswith(f"{below.as_posix()} ")), None)
        assert line is not None, below
        opening = path.read_text().splitlines()[0].lstrip("# ")
        assert opening.split(" ")[0] in line, (line, opening)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    tools = sorted(name for name in scripts if name.startswith("uvlp-"))
    assert f"Tools ({len(tools)};" in printed
    for tool in tools:
        assert any(l.strip().startswith(f"{tool} ") and len(l.split()) > 2 for l in lines), tool
    assert all(len(l) <= 100 for l in lines), max(lines, key=len)
    assert _printed(sys.executable, "-m", "mmf_uvlp") == printed
