"""Checkpoints of random tensors under a public detector file's names and shapes, in its real
file format, from the manifests in tests/fixtures/detector_checkpoints (their README), and the
photograph the comparison with MMF's frcnn port runs on. Standalone (numpy, Pillow):
tools/reference/frcnn_port.py loads this file from an MMF environment."""

import pickle
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "detector_checkpoints"
BOTTOM_UP_ATTR = "bottom_up_attention_R101_C4_attr"
BOTTOM_UP = "bottom_up_attention_R101_C4"


def manifest(name: str) -> Dict[str, Tuple[Tuple[int, ...], str]]:
    """``{key: (shape, dtype)}`` of a public checkpoint, in the file's order."""
    out = {}
    for line in (MANIFESTS / f"{name}.tsv").read_text().splitlines():
        if line.startswith("#") or line.startswith("key\t") or not line.strip():
            continue
        key, shape, dtype = line.split("\t")
        out[key] = (tuple(int(v) for v in shape.split("x")), dtype)
    return out


# The anchors the public files' configs generate (sizes, aspect ratios), which older
# detectron2 saved with the weights (``...anchor_generator.cell_anchors.N``): not learned
ANCHORS = {
    BOTTOM_UP_ATTR: ((64, 128, 256, 512), (0.5, 1.0, 2.0)),
    BOTTOM_UP: ((64, 128, 256, 512), (0.5, 1.0, 2.0)),
}


def cell_anchors(sizes, ratios) -> np.ndarray:
    """Each size's anchors at each aspect ratio (height / width), centred on 0, x1 y1 x2 y2."""
    rows = []
    for size in sizes:
        for ratio in ratios:
            width = np.sqrt(size * size / ratio)
            height = ratio * width
            rows.append([-width / 2, -height / 2, width / 2, height / 2])
    return np.array(rows)


def random_tensors(
    layout: Mapping[str, Tuple[Tuple[int, ...], str]], seed: int, anchors=None
) -> Dict[str, np.ndarray]:
    """Random values of each key's shape: weights scaled by their fan-in, norms near the
    identity (a residual branch's last norm small: detectron2's or maskrcnn-benchmark's names),
    so a deep network stays finite; the anchors (``anchors``: sizes, aspect ratios) as the
    config generates them, or (None) random boxes around 0, where the file's own are used."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, (shape, dtype) in layout.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if "cell_anchors" in key and anchors is None:  # the file's own: boxes around 0
            half = rng.uniform(8, 128, (shape[0], 2))
            value = np.concatenate([-half, half], axis=1)
        elif "cell_anchors" in key:
            value = cell_anchors(*anchors)
            assert value.shape == shape, (key, value.shape, shape)
        elif key.endswith("running_var"):
            value = rng.uniform(0.5, 1.5, shape)
        elif ".norm." in key or ".bn" in key or ".downsample.1." in key:
            small = any(s in key for s in ("conv3", "shortcut", ".bn3.", ".downsample.1."))
            if key.endswith("weight"):
                value = rng.uniform(0.05, 0.2, shape) if small else rng.uniform(0.8, 1.2, shape)
            else:
                value = rng.normal(0, 0.02, shape)
        elif key.endswith("bias"):
            value = rng.normal(0, 0.02, shape)
        elif "embedding" in key:
            value = rng.normal(0, 1.0, shape)
        else:
            value = rng.normal(0, np.sqrt(2.0 / fan_in), shape)
        out[key] = value.astype(dtype)
    return out


def write_pkl(path: Path, tensors: Mapping[str, np.ndarray]) -> Path:
    """detectron2's and py-bottom-up-attention's format: a pickle of ``{"model": {name:
    numpy array}, "__author__": ...}``."""
    with open(path, "wb") as handle:
        pickle.dump(
            {"model": dict(tensors), "__author__": "random tensors for a test"},
            handle,
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    return path


def write_pth(path: Path, tensors: Mapping[str, np.ndarray]) -> Path:
    """maskrcnn-benchmark's format: ``torch.save({"model": state dict})``."""
    import torch

    torch.save({"model": {k: torch.from_numpy(v) for k, v in tensors.items()}}, path)
    return path


def public_checkpoint(
    name: str,
    path: Path,
    seed: int = 0,
    rename: Optional[Tuple[str, str]] = None,
    reshape: Optional[str] = None,
) -> Path:
    """A random checkpoint of manifest ``name`` at ``path`` (``.pkl`` or ``.pth``), with one
    key renamed (``rename=(old, new)``) or one key's first dimension one larger."""
    tensors = random_tensors(manifest(name), seed, ANCHORS.get(name))
    if rename is not None:
        tensors = {rename[1] if k == rename[0] else k: v for k, v in tensors.items()}
    if reshape is not None:
        value = tensors[reshape]
        tensors[reshape] = np.concatenate([value, value[:1]], axis=0)
    return (write_pkl if path.suffix == ".pkl" else write_pth)(path, tensors)


# scikit-image's chelsea (300 x 451) cut to 192 x 288: a photograph at the size the comparison
# runs at (INPUT.MIN_SIZE_TEST 192), so that neither side resizes it (no resampling to differ)
COMPARISON_CROP = (slice(54, 246), slice(80, 368))
COMPARISON_SIZE = 192


def chelsea_png() -> Path:
    """scikit-image's bundled chelsea.png, found without importing scikit-image."""
    import importlib.util

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("scikit-image is not installed here: give its data/chelsea.png")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "chelsea.png"


def comparison_photo(folder: Path, source: Optional[Path] = None) -> Path:
    """The comparison's photograph as ``folder/chelsea.png`` (lossless), cut from
    ``source`` (default: :func:`chelsea_png`)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    with Image.open(source or chelsea_png()) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape == (300, 451, 3), pixels.shape
    path = folder / "chelsea.png"
    Image.fromarray(np.ascontiguousarray(pixels[COMPARISON_CROP])).save(path)
    return path
