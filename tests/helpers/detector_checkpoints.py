"""Public detector checkpoints rebuilt from their manifests (tests/fixtures/
detector_checkpoints/): every key, shape and dtype of the public file, random values, the
public file's format. The values are random but kept in a range where a deep network's
activations stay finite: unit-variance fan-in scaling for weights, positive variances, small
scales on each residual branch's last norm, and anchors that are boxes around the origin."""

import math
from pathlib import Path
from typing import Dict, List, Tuple, Union

import numpy as np
import torch

from helpers import REPO

MANIFESTS = REPO / "tests" / "fixtures" / "detector_checkpoints"


def read_manifest(name: str) -> List[Tuple[str, Tuple[int, ...], str]]:
    """(key, shape, dtype) of every tensor of ``MANIFESTS/<name>.tsv``, in the file's order."""
    rows = []
    for line in (MANIFESTS / f"{name}.tsv").read_text().splitlines():
        if not line or line.startswith("#") or line.startswith("key\t"):
            continue
        key, shape, dtype = line.split("\t")
        rows.append((key, tuple(int(d) for d in shape.split("x")), dtype))
    return rows


def _value(key: str, shape: Tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if "cell_anchors" in key:
        half = rng.uniform(8, 128, size=(shape[0], 2))
        return np.concatenate([-half, half], axis=1)
    if key.endswith("running_var"):
        return rng.uniform(0.5, 1.5, size=shape)
    if key.endswith("running_mean") or key.endswith("bias"):
        return rng.normal(0, 0.05, size=shape)
    last_norm = key.rsplit(".", 1)[0].endswith(("bn3", "conv3.norm"))
    if len(shape) == 1:  # a norm's scale
        return rng.uniform(0.02, 0.1, size=shape) if last_norm else rng.uniform(0.5, 1, size=shape)
    fan_in = int(np.prod(shape[1:]))
    return rng.normal(0, 1 / math.sqrt(fan_in), size=shape)


def random_state(name: str, seed: int = 0, prefix: Union[str, Tuple[str, ...]] = ""
                 ) -> Dict[str, torch.Tensor]:
    """A state dict of random tensors under the manifest's names, shapes and dtypes (those
    whose key starts with ``prefix``, or one of them)."""
    rng = np.random.default_rng(seed)
    return {key: torch.from_numpy(_value(key, shape, rng).astype(dtype))
            for key, shape, dtype in read_manifest(name) if key.startswith(prefix)}


def save_pth(state: Dict[str, torch.Tensor], path: Path) -> Path:
    """``torch.save({"model": state})``, as maskrcnn-benchmark's checkpoints are saved."""
    torch.save({"model": state}, path)
    return path
