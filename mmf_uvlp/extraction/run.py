"""One extraction run: images in, VinVL's raw detector layout out, streaming and resumable.

``OUT`` receives what ``uvlp-convert-features`` and the corpus builder read as a
detector's raw output (``mmf_uvlp.data_formats.vinvl_raw``):

- ``predictions.tsv``: ``<key>\\t{"objects": [{"rect", "bbox_id", "class", "conf",
  "feature" (base64 of D float32), "attributes", "attr_scores"}], "relations": null}``;
- ``hw.tsv``: ``<key>\\t[{"height": H, "width": W}]``, the size the boxes are in (EXIF
  orientation applied);
- ``labelmap.json``: ``label_to_idx`` / ``idx_to_label`` (ids from 1), and the attributes';
- ``problems.tsv``: every image skipped, converted, or written with no region, ``<key>\\t
  <source>\\t<skipped|converted|written>\\t<kind>\\t<reason>``; ``report.json``: the counts
  (``converted`` counts the images written with no region as ``no_regions``).

The images are read in listing order, ``batch_size`` at a time. After each batch both tsv
files are flushed to disk and ``OUT/.extract/state.json`` records their sizes and the next
image; a run started again with the same inputs and settings (after any interruption, ``kill
-9`` included) truncates the files to the last commit and goes on, so its output is byte for
byte an uninterrupted run's. A file found shorter than the batches committed to it (or, in a
finished run, of another size than the run wrote, or missing) is named in the log and the run
extracts again from the first image. ``shard=(i, n)`` extracts the ``i``-th of ``n``
contiguous runs of whole batches; :func:`merge` joins the shards' folders into a single run's
output.

``OUT`` is refused when it holds files and no ``.extract/`` (another tool's output, such as a
user's own VinVL ``predictions.tsv``: ``uvlp-convert-features`` refuses it the same way), and
while another extraction writes into it (the lock ``OUT/.extract/lock``, held by a run or a
launch for as long as it runs). An error while writing (a full disk) names the file.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

from filelock import FileLock, Timeout

from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.utils.atomic import atomic_open, atomic_write_json
from mmf_uvlp.utils.file_signature import file_signature
from mmf_uvlp.utils.output_folder import refuse_foreign_folder
from mmf_uvlp.extraction.images import (
    MAX_PIXELS,
    MIN_SIDE,
    BadImage,
    Listing,
    decode,
    list_images,
    read_bytes,
)

logger = logging.getLogger(__name__)

OUTPUTS = ("predictions.tsv", "hw.tsv", "labelmap.json", "problems.tsv", "report.json")
TSVS = ("predictions.tsv", "hw.tsv")
STATE_DIR = ".extract"
STATE = os.path.join(STATE_DIR, "state.json")
LOCK = os.path.join(STATE_DIR, "lock")
LAUNCH = os.path.join("launch", "launch.json")


@dataclass(frozen=True)
class RunOptions:
    """How the images are read and batched (the detector's settings are its own)."""

    batch_size: int = 4
    min_side: int = MIN_SIDE
    max_pixels: int = MAX_PIXELS
    progress: bool = True
    restart: bool = False


@dataclass
class Summary:
    out: str
    listed: int
    written: int
    regions: int
    feature_dim: int
    skipped: Dict[str, int] = field(default_factory=dict)
    converted: Dict[str, int] = field(default_factory=dict)
    resumed_at: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time over the same span


def shard_range(n_images: int, batch_size: int, shard: Tuple[int, int]) -> Tuple[int, int]:
    """The images [lo, hi) of shard ``i/n``: a contiguous run of whole batches."""
    i, n = shard
    if not 0 <= i < n:
        raise ValueError(f"shard {i}/{n}: expected 0 <= i < n")
    batches = -(-n_images // batch_size)
    lo, hi = batches * i // n, batches * (i + 1) // n
    return min(lo * batch_size, n_images), min(hi * batch_size, n_images)


def labelmap(classes: Sequence[str], attributes: Sequence[str]) -> Dict[str, object]:
    """VinVL's json label map (``VG-SGG-dicts``-style): ids from 1, 0 the background."""
    return {
        "label_to_idx": {name: i + 1 for i, name in enumerate(classes)},
        "idx_to_label": {str(i + 1): name for i, name in enumerate(classes)},
        "attribute_to_idx": {name: i + 1 for i, name in enumerate(attributes)},
        "idx_to_attribute": {str(i + 1): name for i, name in enumerate(attributes)},
    }


def prediction_row(key: str, det, classes: Sequence[str], attributes: Sequence[str]) -> bytes:
    """One ``predictions.tsv`` line."""
    objects = []
    for i in range(len(det.scores)):
        objects.append(
            {
                "rect": [float(v) for v in det.boxes[i]],
                "bbox_id": i,
                "class": classes[int(det.classes[i])],
                "conf": float(det.scores[i]),
                "feature": base64.b64encode(det.features[i].astype("<f4").tobytes()).decode(),
                "attributes": [attributes[a] for a in det.attributes[i]],
                "attr_scores": [float(s) for s in det.attr_scores[i]],
            }
        )
    return f"{key}\t{json.dumps({'objects': objects, 'relations': None})}\n".encode()


def hw_row(key: str, height: int, width: int) -> bytes:
    return f"{key}\t{json.dumps([{'height': height, 'width': width}])}\n".encode()


def problem_row(key: str, source: str, action: str, kind: str, reason: str) -> str:
    clean = [
        str(v).replace("\t", " ").replace("\n", " ") for v in (key, source, action, kind, reason)
    ]
    return "\t".join(clean) + "\n"


@contextlib.contextmanager
def claim(out: str) -> Iterator[None]:
    """``out`` for this extraction (a run or a launch) alone, while the block runs: refused
    when it holds another tool's files, or while another extraction holds its lock."""
    refuse_foreign_folder(out, STATE_DIR, "uvlp-extract-features")
    os.makedirs(os.path.join(out, STATE_DIR), exist_ok=True)
    lock = FileLock(os.path.join(out, LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RuntimeError(
            f"{out} is being written by another extraction (it holds "
            f"{os.path.join(out, LOCK)}): wait for it to end, or use another "
            "--out"
        ) from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """An OSError of the block (writing ``path``) raised again naming ``path``; a full disk
    says how to go on."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OSError(
                exc.errno,
                f"{path}: no space left on device; free some space and "
                "run the same command again: it resumes after the last batch "
                "written whole",
            ) from None
        if exc.filename is None:
            raise OSError(exc.errno, f"{path}: {exc.strerror or exc}") from None
        raise


def damage(out: str, state: Dict) -> Optional[str]:
    """What is wrong with ``out``'s files against its ``state``: a tsv shorter than the
    batches committed to it (in a finished run: of another size, or a file missing); None
    when they are whole."""
    complete = state.get("complete")
    for name in TSVS:
        path = os.path.join(out, name)
        have = os.path.getsize(path) if os.path.exists(path) else 0
        want = state["bytes"][name]
        if have < want or (complete and have != want):
            wrote = "the finished run wrote" if complete else "the batches committed hold"
            return f"{path} has {have} bytes where {wrote} {want}"
    for name in OUTPUTS if complete else ():
        if not os.path.exists(os.path.join(out, name)):
            return f"{os.path.join(out, name)} of the finished run is missing"
    return None


def finished(out: str) -> bool:
    """``out`` holds a finished run (or shard) whose files are whole."""
    state = read_json(os.path.join(out, STATE))
    return bool(state and state.get("complete")) and damage(out, state) is None


def _fingerprint(
    listing_source: str,
    listing: Listing,
    detector_info: Dict[str, object],
    weights: Optional[str],
    seed: Optional[int],
    classes,
    attributes,
    options: RunOptions,
    shard: Optional[Tuple[int, int]],
) -> str:
    """What the output depends on: the listing (each image's key and source), the detector,
    its weights and names, and how the images are batched."""
    source = (
        file_signature(listing_source)
        if os.path.isfile(listing_source)
        else os.path.abspath(listing_source)
    )
    listed = hashlib.sha256(
        "\n".join(f"{r.key}\t{r.source}" for r in listing.images).encode()
    ).hexdigest()
    data = {
        "images": source,
        "listed": listed,
        "detector": detector_info,
        "weights": file_signature(weights) if weights and os.path.isfile(weights) else weights,
        "seed": seed,
        "classes": list(classes),
        "attributes": list(attributes),
        "batch_size": options.batch_size,
        "min_side": options.min_side,
        "max_pixels": options.max_pixels,
        "shard": list(shard) if shard else None,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def extract(
    images: str,
    out: str,
    detector,
    classes: Sequence[str],
    attributes: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    shard: Optional[Tuple[int, int]] = None,
    weights: Optional[str] = None,
    seed: Optional[int] = None,
    sink: Optional[Callable[[str, object, int, int], None]] = None,
) -> Summary:
    """Extract the regions of every image of ``images`` (a folder, list file or tsv) into
    ``out``; resumes an interrupted run of the same inputs and settings. ``sink(key,
    detections, width, height)``, given, also receives each image written (before its batch
    is committed, so that a resumed run gives it again every image after the commit)."""
    with claim(out):
        return _extract(
            images, out, detector, classes, attributes, options, shard, weights, seed, sink
        )


def _extract(
    images: str,
    out: str,
    detector,
    classes: Sequence[str],
    attributes: Sequence[str],
    options: RunOptions,
    shard: Optional[Tuple[int, int]],
    weights: Optional[str],
    seed: Optional[int],
    sink: Optional[Callable[[str, object, int, int], None]],
) -> Summary:
    from tqdm import tqdm

    launch = read_json(os.path.join(out, LAUNCH))
    if launch is not None:
        raise RuntimeError(
            f"{out} holds a launch of {launch.get('shards')} shards: run the "
            f"same command with --shards {launch.get('shards')} to resume it, "
            "or use another --out"
        )
    if len(classes) != detector.num_classes:
        raise ValueError(
            f"{len(classes)} class names for a detector of {detector.num_classes} classes"
        )
    n_attributes = detector.describe()["num_attributes"]
    if len(attributes) != n_attributes:
        raise ValueError(
            f"{len(attributes)} attribute names for a detector of {n_attributes} attributes"
        )
    listing = list_images(images)
    lo, hi = (
        (0, len(listing.images))
        if shard is None
        else shard_range(len(listing.images), options.batch_size, shard)
    )
    fingerprint = _fingerprint(
        images, listing, detector.describe(), weights, seed, classes, attributes, options, shard
    )
    state_path = os.path.join(out, STATE)
    state = read_json(state_path)
    if state is not None and state.get("fingerprint") != fingerprint and not options.restart:
        raise RuntimeError(
            f"{out} holds an extraction of other images or settings "
            f"({state_path}); use another --out, or --restart to start over"
        )
    problem = None if state is None or options.restart else damage(out, state)
    if problem is not None:
        logger.warning(
            "%s: damaged since it was written; extracting again from the first image", problem
        )
        state = None
    if state is None or options.restart or state.get("fingerprint") != fingerprint:
        refused = listing.refused if (shard is None or shard[0] == 0) else []
        state = {
            "fingerprint": fingerprint,
            "next": lo,
            "bytes": {"predictions.tsv": 0, "hw.tsv": 0},
            "regions": 0,
            "written": 0,
            "complete": False,
            "problems": [
                problem_row(ref.key, ref.source, "skipped", kind, reason)
                for ref, kind, reason in refused
            ],
        }
        for name in OUTPUTS:
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
    resumed_at = state["next"] - lo
    if state["complete"]:
        logger.info("%s: already extracted from these images and settings", out)
        return _summary(out, state, detector, resumed_at, 0.0, hi - lo)
    handles = {}
    for name in TSVS:
        path = os.path.join(out, name)
        with writing(path):
            handle = open(path, "ab")
            handles[name] = handle
            handle.truncate(state["bytes"][name])
            handle.seek(state["bytes"][name])
    start, cpu_start = time.time(), time.process_time()
    bar = tqdm(
        total=hi - lo,
        initial=state["next"] - lo,
        unit="img",
        desc="extract",
        disable=not options.progress,
        dynamic_ncols=True,
    )
    try:
        for first in range(state["next"], hi, options.batch_size):
            refs = listing.images[first : min(first + options.batch_size, hi)]
            arrays, kept = [], []
            for ref in refs:
                try:
                    array, conversions = decode(
                        read_bytes(ref, listing.tsv), options.min_side, options.max_pixels
                    )
                except BadImage as bad:
                    state["problems"].append(
                        problem_row(ref.key, ref.source, "skipped", bad.kind, str(bad))
                    )
                    continue
                except OSError as exc:
                    state["problems"].append(
                        problem_row(ref.key, ref.source, "skipped", "unreadable", str(exc))
                    )
                    continue
                for kind in conversions:
                    state["problems"].append(
                        problem_row(ref.key, ref.source, "converted", kind, _CONVERSIONS[kind])
                    )
                arrays.append(array)
                kept.append(ref)
            rows = {name: [] for name in TSVS}
            for ref, array, det in zip(kept, arrays, detector(arrays)):
                rows["predictions.tsv"].append(prediction_row(ref.key, det, classes, attributes))
                rows["hw.tsv"].append(hw_row(ref.key, *array.shape[:2]))
                if sink is not None:
                    sink(ref.key, det, array.shape[1], array.shape[0])
                state["regions"] += len(det.scores)
                state["written"] += 1
                if not len(det.scores):
                    state["problems"].append(
                        problem_row(
                            ref.key,
                            ref.source,
                            "written",
                            "no_regions",
                            "written with no region: "
                            "the detector gave no proposal (its row has an empty object list)",
                        )
                    )
            for name, handle in handles.items():
                with writing(handle.name):
                    handle.write(b"".join(rows[name]))
                    handle.flush()
                    os.fsync(handle.fileno())
                state["bytes"][name] = handle.tell()
            state["next"] = first + len(refs)
            with writing(state_path):
                atomic_write_json(state_path, state)
            bar.update(len(refs))
    finally:
        bar.close()
        for handle in handles.values():
            # after a failed write: what its buffer held is not committed, a rerun rewrites it
            with contextlib.suppress(OSError):
                handle.close()
    _write_tail(out, state, classes, attributes, detector.feature_dim, detector.weights.as_dict())
    state["complete"] = True
    with writing(state_path):
        atomic_write_json(state_path, state)
    summary = _summary(out, state, detector, resumed_at, time.time() - start, hi - lo)
    summary.cpu_seconds = time.process_time() - cpu_start
    return summary


_CONVERSIONS = {
    "exif_rotated": "turned upright by its EXIF orientation (boxes and hw.tsv are upright)",
    "grayscale": "grayscale, given to the detector as RGB",
    "cmyk": "CMYK, converted to RGB",
    "16bit": "16-bit, scaled to 8 bits",
    "palette_or_alpha": "palette or alpha channel, converted to RGB",
}


def _counts(problems: Sequence[str]) -> Tuple[Dict[str, int], Dict[str, int]]:
    """(skipped, converted or written with no region) images, by kind."""
    skipped: Counter = Counter()
    noted: Counter = Counter()
    for row in problems:
        _, _, action, kind, _ = row.rstrip("\n").split("\t")
        (skipped if action == "skipped" else noted)[kind] += 1
    return dict(sorted(skipped.items())), dict(sorted(noted.items()))


def _write_tail(
    out: str, state: Dict, classes, attributes, feature_dim: int, weights: Dict[str, object]
) -> None:
    """labelmap.json, problems.tsv and report.json of a finished run or merge; ``weights``:
    how the detector's weights were loaded (``whole``, ``partial`` or ``random``)."""
    path = os.path.join(out, "labelmap.json")
    with writing(path):
        atomic_write_json(path, labelmap(classes, attributes))
    path = os.path.join(out, "problems.tsv")
    with writing(path), open(path, "w", encoding="utf-8") as handle:
        handle.writelines(state["problems"])
    skipped, converted = _counts(state["problems"])
    path = os.path.join(out, "report.json")
    with writing(path):
        atomic_write_json(
            path,
            {
                "images_written": state["written"],
                "regions": state["regions"],
                "feature_dim": feature_dim,
                "skipped": skipped,
                "converted": converted,
                "num_classes": len(classes),
                "num_attributes": len(attributes),
                "weights": weights,
            },
        )


def _summary(out, state, detector, resumed_at, seconds, listed) -> Summary:
    skipped, converted = _counts(state["problems"])
    return Summary(
        out,
        listed,
        state["written"],
        state["regions"],
        detector.feature_dim,
        skipped,
        converted,
        resumed_at,
        seconds,
    )


def merge(shard_dirs: Sequence[str], out: str) -> Dict[str, object]:
    """The shards' outputs (in shard order) into ``out``: a single run's files."""
    states = []
    for folder in shard_dirs:
        state = read_json(os.path.join(folder, STATE))
        if state is None or not state.get("complete"):
            raise RuntimeError(f"{folder}: the shard is not complete ({STATE})")
        states.append(state)
    os.makedirs(out, exist_ok=True)
    for name in TSVS:
        path = os.path.join(out, name)
        with writing(path), atomic_open(path, "wb", temporary=path + ".part") as target:
            for folder in shard_dirs:
                with open(os.path.join(folder, name), "rb") as source:
                    shutil.copyfileobj(source, target)
    first = read_json(os.path.join(shard_dirs[0], "labelmap.json"))
    report = read_json(os.path.join(shard_dirs[0], "report.json"))
    merged = {
        "written": sum(s["written"] for s in states),
        "regions": sum(s["regions"] for s in states),
        "problems": [row for s in states for row in s["problems"]],
    }
    classes = [first["idx_to_label"][str(i + 1)] for i in range(len(first["idx_to_label"]))]
    attributes = [
        first["idx_to_attribute"][str(i + 1)] for i in range(len(first["idx_to_attribute"]))
    ]
    _write_tail(out, merged, classes, attributes, report["feature_dim"], report["weights"])
    return read_json(os.path.join(out, "report.json"))


def merged(shard_dirs: Sequence[str], out: str) -> bool:
    """``out`` holds the whole merge of ``shard_dirs``: its report, and each tsv as long as
    the shards' together (a damaged one is named in the log)."""
    states = [read_json(os.path.join(folder, STATE)) for folder in shard_dirs]
    if not os.path.exists(os.path.join(out, "report.json")) or None in states:
        return False
    for name in TSVS:
        path = os.path.join(out, name)
        want = sum(state["bytes"][name] for state in states)
        have = os.path.getsize(path) if os.path.exists(path) else 0
        if have != want:
            logger.warning(
                "%s has %d bytes where the shards hold %d: merged again", path, have, want
            )
            return False
    return True
