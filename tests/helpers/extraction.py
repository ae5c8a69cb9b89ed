"""What the feature extractor's tests share: the skip reason, photographs, the CLI."""

import os
import subprocess
import sys
from pathlib import Path


NO_DETECTRON2 = (
    "detectron2 is not installed in this environment (make setup EXTRACT=1 makes "
    ".venv-extract; make test runs tests/extraction there)"
)
PHOTOS = ("astronaut", "coffee", "chelsea")
# small, fast settings: 256 px images, 40 proposals, a fixed 6 boxes, one thread
FAST = [
    "--arch",
    "R50-C4",
    "--random-weights",
    "0",
    "--threads",
    "1",
    "--proposals",
    "40",
    "--min-boxes",
    "6",
    "--max-boxes",
    "6",
    "--no-progress",
    "--opts",
    "INPUT.MIN_SIZE_TEST",
    "256",
    "INPUT.MAX_SIZE_TEST",
    "400",
]


def write_photos(folder: Path) -> Path:
    """scikit-image's photographs as PNG files named by key."""
    import skimage.data
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name in PHOTOS:
        Image.fromarray(getattr(skimage.data, name)()).save(folder / f"{name}.png")
    return folder


def extract_cli(*args, check=True, timeout=900, **kwargs) -> subprocess.CompletedProcess:
    """uvlp-extract-features in this interpreter."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.cli.extract_features", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        **kwargs,
    )
    if check:
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result
