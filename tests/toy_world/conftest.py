"""The toy worlds the toy-world tests read, generated once per module."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mmf_uvlp.toy_world import PRESETS, generate_world


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict, float]:
    out = tmp_path_factory.mktemp("toy") / "tiny"
    start = time.perf_counter()
    manifest = generate_world(PRESETS["tiny"], out)
    return out, manifest, time.perf_counter() - start
