"""What the replication tests share: the tools, crafted MMF logs and run folders, steps."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from mmf_uvlp.reference_models import REFERENCE_MODELS
from mmf_uvlp.cli import replicate as replicate_cli

PREFIX = "2026-01-01T00:00:00 | INFO | mmf.train : "


def replicate_tool() -> ModuleType:
    return replicate_cli


def write_train_log(folder: Path, *lines: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("".join(PREFIX + line + "\n" for line in lines))


TINY_MODELS = tuple(
    f"configs/models/{model}/tiny_random.yaml" for model in ("uvla", *REFERENCE_MODELS)
)


def compose(command: tuple[str, ...]):
    """MMF's configuration of an ``mmf_run`` command (as ``tests/models/test_reference_models.py``)."""
    import argparse

    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    previous = registry.get("config", no_warning=True)
    setup_imports()
    registry.register("config", None)  # MMF reads its defaults while no config is registered
    try:
        args = argparse.Namespace(config_override=None, opts=list(command[1:]))
        return Configuration(args).get_config()
    finally:
        registry.register("config", previous)


@pytest.mark.slow
def wall_line(table: str) -> str:
    return next(line for line in table.splitlines() if line.startswith("Wall time"))


def wall_line_of(entries: list) -> str:
    """The wall time a table prints: the sum of its systems' runs (not the world's or the
    corpus's) in runs.json."""
    hours = sum(e["wall_s"] for e in entries if e["system"] is not None) / 3600
    return f"Wall time of this table's runs (sum of the recorded runs): {hours:.2f} h."
