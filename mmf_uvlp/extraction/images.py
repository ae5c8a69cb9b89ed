"""The extractor's inputs: listing images, and decoding each into an RGB array or a named problem.

Three kinds of input, each an ordered list of (key, source):

- a folder: every file below it whose name ends in an image extension, in sorted path order;
- a list file: one image path a line (relative paths from the list's folder; blank lines and
  ``#`` comments skipped);
- a scene_graph_benchmark-style tsv: ``<image key>\\t<base64 of the encoded image>`` a line.

The key is the file name without its extension (the tsv's first column), the name MMF's
builders look an image's features up by. A second image of a key that was listed already is a
``duplicate_key`` problem naming the first; other files of a folder are counted as
``not_an_image_name``, a symbolic link to nothing as ``broken_link``, and a folder named like
an image or a FIFO, socket or device as ``not_a_file`` (an image a list file names is checked
to be a regular file before it is read: a FIFO is never opened for a blocking read).

:func:`decode` returns the image as (H, W, 3) uint8 RGB, upright (its EXIF orientation
applied), and the conversions it made (grayscale, CMYK, 16-bit, palette or alpha, EXIF
rotation), which the report counts. An image that cannot be used raises :class:`BadImage`:
``corrupt``, ``truncated``, ``tiny`` (a side under ``min_side`` pixels), ``huge`` (over
``max_pixels``, checked before decoding).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
MIN_SIDE = 32
MAX_PIXELS = 50_000_000
EXIF_ORIENTATION = 0x0112


class BadImage(Exception):
    """An image the extractor skips: ``kind`` (one word) and a one-line reason."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ImageRef:
    """One listed image: its key, where it comes from (a path, or ``tsv:line``) and, for a
    tsv, the byte offset of its line."""

    key: str
    source: str
    offset: Optional[int] = None


@dataclass(frozen=True)
class Listing:
    """What an input lists: the images to extract, and those refused before decoding."""

    images: List[ImageRef]
    refused: List[Tuple[ImageRef, str, str]]  # (image, kind, reason)
    tsv: Optional[str] = None


def list_images(source: str) -> Listing:
    """The images of a folder, a list file (``.txt``/``.lst``/``.list``) or a ``.tsv``."""
    path = Path(source)
    if path.is_dir():
        return _dedup(_folder(path))
    if not path.is_file():
        raise FileNotFoundError(f"--images {source}: no such folder or file")
    if path.suffix.lower() == ".tsv":
        return _dedup(_tsv(path), tsv=str(path))
    return _dedup(_list_file(path))


Problem = Optional[Tuple[str, str]]  # (kind, reason) of an entry refused while listing


def _folder(root: Path) -> Iterator[Tuple[ImageRef, Problem]]:
    for path in sorted(root.rglob("*")):
        ref = ImageRef(path.stem, str(path))
        named_like_an_image = path.suffix.lower() in IMAGE_EXTENSIONS
        if path.is_dir():  # its files are listed on their own
            if named_like_an_image:
                yield ref, ("not_a_file", "a folder, not an image file")
        elif path.is_symlink() and not path.exists():
            yield (
                ref,
                ("broken_link", f"a symbolic link to {os.readlink(path)}, which does not exist"),
            )
        elif not path.is_file():
            yield ref, ("not_a_file", f"{_file_type(path.stat().st_mode)}, not an image file")
        elif named_like_an_image:
            yield ref, None
        else:
            yield (
                ref,
                (
                    "not_an_image_name",
                    f"not an image file name (extensions: {' '.join(IMAGE_EXTENSIONS)})",
                ),
            )


def _file_type(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _list_file(path: Path) -> Iterator[Tuple[ImageRef, Problem]]:
    with open(path, encoding="utf-8") as handle:
        for text in handle:
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            image = Path(text) if os.path.isabs(text) else path.parent / text
            yield ImageRef(image.stem, str(image)), None


def _tsv(path: Path) -> Iterator[Tuple[ImageRef, Problem]]:
    offset = 0
    with open(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            key = raw.split(b"\t", 1)[0].decode("utf-8", "replace").strip()
            yield ImageRef(key, f"{path}:{line}", offset), None
            offset += len(raw)


def _dedup(items, tsv: Optional[str] = None) -> Listing:
    images: List[ImageRef] = []
    refused: List[Tuple[ImageRef, str, str]] = []
    first: Dict[str, ImageRef] = {}
    for ref, problem in items:
        if problem is not None:
            refused.append((ref, *problem))
        elif ref.key in first:
            refused.append(
                (
                    ref,
                    "duplicate_key",
                    f"key {ref.key!r} was listed already, by "
                    f"{first[ref.key].source} (keys are file names without extension)",
                )
            )
        else:
            first[ref.key] = ref
            images.append(ref)
    return Listing(images, refused, tsv)


def read_bytes(ref: ImageRef, tsv: Optional[str]) -> bytes:
    """The encoded image of ``ref``; :class:`BadImage` ``not_a_file`` for a folder, FIFO,
    socket or device (opened without blocking, checked before reading)."""
    if tsv is None:
        descriptor = os.open(ref.source, os.O_RDONLY | os.O_NONBLOCK)
        with open(descriptor, "rb") as handle:
            mode = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(mode):
                raise BadImage("not_a_file", f"{_file_type(mode)}, not an image file")
            return handle.read()
    with open(tsv, "rb") as handle:
        handle.seek(ref.offset)
        raw = handle.readline()
    columns = raw.rstrip(b"\r\n").split(b"\t")
    if len(columns) < 2:
        raise BadImage("corrupt", "expected <key>\\t<base64 image>, got one column")
    try:
        return base64.b64decode(columns[-1], validate=True)
    except (binascii.Error, ValueError):
        raise BadImage("corrupt", "the image column is not base64") from None


def decode(
    data: bytes, min_side: int = MIN_SIDE, max_pixels: int = MAX_PIXELS
) -> Tuple[np.ndarray, List[str]]:
    """(H, W, 3) uint8 RGB, upright, and the conversions made; BadImage when unusable."""
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise BadImage("corrupt", "not an image PIL can identify") from None
    except Image.DecompressionBombError as exc:  # over twice PIL's own limit
        raise BadImage("huge", f"{exc} (--max-pixels {max_pixels})") from None
    width, height = image.size
    if width * height > max_pixels:
        raise BadImage(
            "huge",
            f"{width}x{height} = {width * height / 1e6:.1f} MP, over the "
            f"limit of {max_pixels / 1e6:g} MP (--max-pixels)",
        )
    try:
        image.load()
    except OSError as exc:
        kind = "truncated" if "truncated" in str(exc).lower() else "corrupt"
        raise BadImage(kind, f"cannot be decoded: {exc}") from None
    except (ValueError, SyntaxError) as exc:
        raise BadImage("corrupt", f"cannot be decoded: {exc}") from None
    conversions: List[str] = []
    if image.getexif().get(EXIF_ORIENTATION, 1) != 1:
        image = ImageOps.exif_transpose(image)
        conversions.append("exif_rotated")
    array = _rgb(image, conversions)
    if min(array.shape[:2]) < min_side:
        raise BadImage(
            "tiny", f"{array.shape[1]}x{array.shape[0]}, a side under {min_side} px (--min-side)"
        )
    return array, conversions


def _rgb(image: Image.Image, conversions: List[str]) -> np.ndarray:
    mode = image.mode
    if mode == "RGB":
        return np.asarray(image, dtype=np.uint8)
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        values = np.asarray(image).astype(np.int64)
        top = 65535 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255
        gray = ((np.clip(values, 0, top) * 255 + top // 2) // top).astype(np.uint8)
        conversions.append("16bit")
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode in ("L", "1"):
        conversions.append("grayscale")
    elif mode == "CMYK":
        conversions.append("cmyk")
    elif mode in ("P", "PA", "RGBA", "LA", "La", "RGBa"):
        conversions.append("palette_or_alpha")
    else:
        conversions.append(f"mode_{mode}")
    return np.asarray(image.convert("RGB"), dtype=np.uint8)
