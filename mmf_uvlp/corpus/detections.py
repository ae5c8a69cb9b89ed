"""Stage 1: read detector output, validated, one image at a time.

Inputs (see docs/corpus.md): VinVL ``predictions.tsv`` or the simple ``detections.jsonl``,
optionally with VinVL ``features.tsv`` in the same row order. Every row is parsed and checked
by ``mmf_uvlp.data_formats.vinvl`` (the project's one implementation of these formats); a
features row must also name the same image and box count as its detections row.

An image's *position* is its 0-based line index in the detections file (blank and bad lines
count too), so that chunking and sharding never depend on what was skipped. ``DetectionReader``
yields ``(position, source, Detection)`` for good rows and ``(position, source, FormatError)``
for bad ones (a position may come with several errors, e.g. a blank features line before
its row); the caller decides (``ErrorPolicy``) whether to stop or count. A bad row drops
the whole image (a dropped box would shift the alignment between boxes and feature rows).

Rows are paired by image id in file order. A blank line in either file is a bad line of
its own file; it takes no row of the other file unless it stands where a row of that image
should be (the next row of the other file belongs to another image). A second row for an
image id already seen is a bad row too (the error names both lines); the first row keeps
the id. A features row of another image (the files out of step) and extra features rows are
always fatal. D (``feature_dim``) is the configured size or, by default,
``mmf_uvlp.data_formats.vinvl.infer_feature_dim``'s majority of the first rows.

A detector's raw output (scene_graph_benchmark's ``predictions.tsv``, see
``mmf_uvlp.data_formats.vinvl_raw``) reads the same way: its image sizes come from ``hw``
(the data set's ``hw.tsv``), the features embedded in its objects are checked in place of a
``features.tsv`` (D: the configured size or the majority of the first rows), and ``labelmap``
turns classes given by id into names (and checks names) for either kind of ``predictions.tsv``.
"""

from __future__ import annotations

import glob
import json
import math
import os
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple, Union

from mmf_uvlp.corpus.sentences import read_json
from mmf_uvlp.corpus.detection import Detection
from mmf_uvlp.corpus.stage import StageContext
from mmf_uvlp.corpus.tag_query import ranked_tags
from mmf_uvlp.corpus.work import Clock, add_timing, chunk_file
from mmf_uvlp.data_formats.labelmap import load_labelmap
from mmf_uvlp.errors import EmptyInputError, FormatError
from mmf_uvlp.utils.atomic import atomic_write_bytes, atomic_write_json
from mmf_uvlp.utils.error_policy import ErrorPolicy
from mmf_uvlp.data_formats.vinvl import (
    duplicate_id_error,
    infer_feature_dim,
    is_blank,
    parse_detections_jsonl_row,
    parse_features_row,
    row_image_id,
)
from mmf_uvlp.data_formats.vinvl_raw import (
    ImageSizes,
    infer_embedded_feature_dim,
    parse_detector_row,
)


class _FeatureRows:
    """``features.tsv`` as a queue: blank lines and the next row, looked at before taken."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.line = 0  # lines taken so far
        self._ahead: List[bytes] = []  # lines read but not taken

    def _peek_line(self, k: int) -> bytes:
        while len(self._ahead) <= k:
            self._ahead.append(self.handle.readline())
        return self._ahead[k]

    def blanks(self) -> int:
        """How many blank lines come before the next row (or the end of the file)."""
        k = 0
        while self._peek_line(k) and is_blank(self._peek_line(k)):
            k += 1
        return k

    def row_after_blanks(self) -> Tuple[int, bytes]:
        """(line, raw) of the next row after the blank lines; raw is b"" at the end."""
        k = self.blanks()
        return self.line + k + 1, self._peek_line(k)

    def take_row(self) -> None:
        """Take the blank lines and the row after them."""
        for _ in range(self.blanks() + 1):
            self.take()

    def take(self) -> Tuple[int, bytes]:
        """Take the next line (blank or not): (line, raw), raw b"" at the end of file."""
        raw = self._peek_line(0)
        self._ahead.pop(0)
        if raw:
            self.line += 1
        return self.line if raw else self.line + 1, raw


class DetectionReader:
    """Stream an image's detections by position; validate features.tsv alongside.

    ``wanted(position)`` selects the rows to parse (the others are only paired and their
    ids recorded), so a shard reads the file but parses only its own images. After iteration
    ``positions`` holds the number of rows (lines) seen and ``feature_dim`` the appearance
    dimension D the features were checked against. Every image id is kept in memory to find
    duplicates (about 100 bytes per image).
    """

    def __init__(
        self,
        predictions: Optional[str] = None,
        detections_jsonl: Optional[str] = None,
        features: Optional[str] = None,
        feature_dim: Optional[int] = None,
        validate_features: bool = True,
        box_tolerance: float = 1.0,
        hw: Optional[str] = None,
        labelmap: Optional[str] = None,
    ) -> None:
        if bool(predictions) == bool(detections_jsonl):
            raise ValueError("give exactly one of predictions / detections_jsonl")
        if (hw or labelmap) and not predictions:
            raise ValueError("hw and labelmap go with predictions (a predictions.tsv)")
        self.path = predictions or detections_jsonl
        self.kind = "predictions" if predictions else "detections_jsonl"
        self.features = features if validate_features else None
        self.validate_features = validate_features
        self.feature_dim = feature_dim
        self.box_tolerance = box_tolerance
        self.hw, self.labelmap = hw, labelmap
        self._sizes: Optional[ImageSizes] = None
        self._labels = None
        self.positions = 0
        self._seen: Dict[str, int] = {}  # image id -> line of its first row

    def __iter__(self) -> Iterator[Tuple[int, str, Union[Detection, FormatError]]]:
        if self.hw and self._sizes is None:
            self._sizes = ImageSizes(self.hw)
        if self.labelmap and self._labels is None:
            self._labels = load_labelmap(self.labelmap)
        if (
            self.features
            and self.kind == "predictions"
            and infer_embedded_feature_dim(self.path) is not None
        ):
            raise ValueError(
                f"{self.path} embeds its features in its objects (a detector's "
                f"raw output): give no features.tsv ({self.features})"
            )
        if self.features and self.feature_dim is None:
            self.feature_dim = infer_feature_dim(self.features)
        elif (
            self.kind == "predictions"
            and self.validate_features
            and not self.features
            and self.feature_dim is None
        ):
            self.feature_dim = infer_embedded_feature_dim(self.path)
        self._seen = {}
        if not self.features:
            for line, raw in _numbered(self.path):
                yield from self._row(line, raw, self._first_line(line, self._id(raw)), None, None)
            return
        with open(self.features, "rb") as handle:
            feats = _FeatureRows(handle)
            blank_rows = 0  # blank detection lines that may stand for a features row
            for line, raw in _numbered(self.path):
                image_id = self._id(raw)
                first_line = self._first_line(line, image_id)
                if is_blank(raw):
                    blank_rows += 1
                    yield from self._row(line, raw, first_line, None, None)
                    continue
                while (
                    blank_rows
                    and image_id
                    and feats.row_after_blanks()[1]
                    and row_image_id(feats.row_after_blanks()[1]) != image_id
                ):
                    feats.take_row()  # the features row of a blanked detections line
                    blank_rows -= 1
                blank_rows = 0
                blanks = feats.blanks()
                next_raw = feats.row_after_blanks()[1]
                other = bool(image_id and next_raw) and row_image_id(next_raw) != image_id
                errors: List[FormatError] = []
                if first_line != line and (other or not next_raw):
                    features_line, features_raw = None, None  # a duplicate without features
                elif other and blanks:  # the first blank stands where this image's row should be
                    features_line, features_raw = feats.take()
                else:
                    for _ in range(blanks):  # blank lines between rows: bad lines of their own
                        errors.append(_blank_line_error(self.features, feats.take()[0]))
                    features_line, features_raw = feats.take()
                if self._wanted is None or self._wanted(line - 1):
                    for err in errors:
                        yield line - 1, "features", err
                yield from self._row(line, raw, first_line, features_line, features_raw)
            while blank_rows and feats.row_after_blanks()[1]:
                feats.take_row()  # rows of blanked detections lines at the end
                blank_rows -= 1
            last = self.positions - 1
            for _ in range(feats.blanks()):  # blank lines at the end
                err = _blank_line_error(self.features, feats.take()[0])
                if self.positions and (self._wanted is None or self._wanted(last)):
                    yield last, "features", err
            extra_line, extra = feats.take()
            if extra:
                raise FormatError(
                    self.features,
                    "row",
                    f"as many rows as {self.path} ({self.positions})",
                    "more rows",
                    line=extra_line,
                )

    _wanted: Optional[Callable[[int], bool]] = None

    def _id(self, raw: bytes) -> Optional[str]:
        """A detections row's image id, None if blank or unreadable."""
        return None if is_blank(raw) else row_image_id(raw, self.kind == "detections_jsonl")

    def _first_line(self, line: int, image_id: Optional[str]) -> int:
        """The line of the first row with ``image_id`` (``line`` itself if new)."""
        return self._seen.setdefault(image_id, line) if image_id else line

    def _row(
        self,
        line: int,
        raw: bytes,
        first_line: int,
        features_line: Optional[int],
        features_raw: Optional[bytes],
    ) -> Iterator[Tuple[int, str, object]]:
        """The item of one detections line (and its features row, None: not checked)."""
        position, self.positions = line - 1, line
        if self._wanted is not None and not self._wanted(position):
            return
        if first_line != line:
            yield (
                position,
                self.kind,
                duplicate_id_error(self.path, line, self._id(raw), first_line),
            )
            return
        try:
            if self.kind == "predictions":
                row = parse_detector_row(
                    raw,
                    self.path,
                    line,
                    self._sizes,
                    self._labels,
                    self.feature_dim,
                    self.box_tolerance,
                    with_features=self.validate_features,
                )
                prediction, embedded_dim = row.prediction, row.feature_dim
            else:
                prediction = parse_detections_jsonl_row(raw, self.path, line, self.box_tolerance)
                embedded_dim = None
        except FormatError as err:
            yield position, self.kind, err
            return
        detection = Detection.from_prediction(prediction, position)
        detection.feature_dim = embedded_dim
        if features_raw is not None:
            try:
                row = parse_features_row(
                    features_raw, self.features, features_line, self.feature_dim, match=prediction
                )
            except FormatError as err:
                if err.field == "image_id":
                    raise  # rows out of step: nothing after this can be trusted
                yield position, "features", err
                return
            detection.feature_dim = row.feature_dim
        yield position, self.kind, detection

    def select(self, wanted: Optional[Callable[[int], bool]]) -> "DetectionReader":
        self._wanted = wanted
        return self


def _numbered(path: str) -> Iterator[Tuple[int, bytes]]:
    with open(path, "rb") as handle:
        yield from enumerate(handle, start=1)


def _blank_line_error(path: str, line: int) -> FormatError:
    """The error of a blank features line that stands for no image's row."""
    return FormatError(path, "row", "a non-empty row", "an empty line", line=line)


class _ChunkWriter:
    """The images of the chunk being read (with their stats and skipped rows), written as
    the chunk's ``work/detections`` file when the next chunk starts."""

    def __init__(self, builder: StageContext, directory: str) -> None:
        self.builder = builder
        self.directory = directory
        self.chunk: Optional[int] = None
        self.images: List[Dict[str, object]] = []
        self.policy = ErrorPolicy(builder.config.run.on_error)
        self.stats: Dict[str, object] = {}

    def start(self, chunk: int) -> None:
        self.flush()
        self.chunk, self.images = chunk, []
        self.policy = ErrorPolicy(self.builder.config.run.on_error)
        self.stats = {
            "rows": 0,
            "images": 0,
            "dropped_no_tags": 0,
            "regions": 0,
            "tags": 0,
            "feature_dim": None,
        }

    def flush(self) -> None:
        if self.chunk is None:
            return
        self.stats["images"] = len(self.images)
        data = {
            "chunk": self.chunk,
            "stats": dict(self.stats, skipped=self.policy.to_dict()),
            "images": self.images,
        }
        atomic_write_bytes(
            chunk_file(self.directory, self.chunk, "json"),
            json.dumps(data, separators=(",", ":")).encode(),
        )
        self.builder.after_chunk("detections", self.chunk)

    def add(self, position: int, detection: Detection, tags: List[str]) -> None:
        """A usable image with its ranked ``tags``."""
        inputs, separator = self.builder.config.inputs, self.builder.config.tags.separator
        if detection.feature_dim:
            self.stats["feature_dim"] = detection.feature_dim
        self.stats["regions"] += detection.num_boxes
        self.stats["tags"] += len(tags)
        self.images.append(
            {
                "position": position,
                "image_id": detection.image_id,
                "feature_key": inputs.feature_key_template.format(image_id=detection.image_id),
                "image_w": detection.image_w,
                "image_h": detection.image_h,
                "tag_query": separator.join(tags),
                "regions": [
                    {"box": box, "label": label, "conf": conf}
                    for box, label, conf in zip(detection.boxes, detection.labels, detection.confs)
                ],
            }
        )


def _reader(builder: StageContext, directory: str) -> DetectionReader:
    """The detections of the shard's chunks not written yet."""
    inputs, size = builder.config.inputs, builder.config.output.chunk_images
    index, count = builder.shard
    finished = {
        int(os.path.basename(path)[6:12])
        for path in glob.glob(os.path.join(directory, "chunk-*.json"))
    }
    return DetectionReader(
        predictions=inputs.predictions,
        detections_jsonl=inputs.detections_jsonl,
        features=inputs.features,
        feature_dim=inputs.feature_dim,
        validate_features=inputs.validate_features,
        box_tolerance=inputs.box_tolerance,
        hw=inputs.hw,
        labelmap=inputs.labelmap,
    ).select(
        lambda position: (position // size) % count == index and (position // size) not in finished
    )


def _read_chunks(builder: StageContext, directory: str, reader: DetectionReader) -> int:
    """Write the chunk files of ``reader``'s images; the rows read."""
    config = builder.config
    writer = _ChunkWriter(builder, directory)
    bar = builder.progress("detections", None)
    rows, last_position = 0, -1
    for position, source, item in reader:
        chunk = position // config.output.chunk_images
        if chunk != writer.chunk:
            writer.start(chunk)
        if position != last_position:  # a row may come with several errors
            last_position = position
            writer.stats["rows"] += 1
            rows += 1
            bar.update(1)
        if isinstance(item, Exception):
            writer.policy.handle(source, item)
            continue
        tags = ranked_tags(item, config.tags)
        if not tags and config.tags.on_empty == "drop":
            writer.stats["dropped_no_tags"] += 1
            continue
        writer.add(position, item, tags)
    writer.flush()
    bar.close()
    return rows


def _no_images(inputs, rows: int, skipped: Dict[str, int], dropped: int) -> None:
    """Stop a build left without images, naming the input files and why."""
    files = " and ".join(
        path
        for path in (
            inputs.predictions or inputs.detections_jsonl,
            inputs.features if inputs.validate_features else None,
        )
        if path
    )
    why = (
        "no rows"
        if rows == 0
        else ", ".join(
            [f"{rows} rows"]
            + ([f"{sum(skipped.values())} skipped {skipped}"] if skipped else [])
            + ([f"{dropped} without tags (tags.*)"] if dropped else [])
        )
    )
    raise EmptyInputError(f"no usable images in {files}: {why}; nothing written")


def _summary(builder: StageContext, directory: str, positions: int) -> Dict[str, object]:
    """The shard's chunks, their image counts and D, from the chunk files."""
    size = builder.config.output.chunk_images
    index, count = builder.shard
    total_chunks = math.ceil(positions / size)
    owned = [chunk for chunk in range(total_chunks) if chunk % count == index]
    images_per_chunk, feature_dim = {}, None
    skipped, dropped = ErrorPolicy("skip"), 0
    for chunk in owned:
        path = chunk_file(directory, chunk, "json")
        if not os.path.exists(path):
            raise RuntimeError(f"{path} missing after reading detections (file changed?)")
        with open(path) as handle:
            data = json.load(handle)
        images_per_chunk[str(chunk)] = len(data["images"])
        feature_dim = feature_dim or data["stats"].get("feature_dim")
        skipped.merge(ErrorPolicy.from_dict(data["stats"]["skipped"]))
        dropped += data["stats"]["dropped_no_tags"]
    if positions == 0 or (count == 1 and not sum(images_per_chunk.values())):
        _no_images(builder.config.inputs, positions, dict(skipped.counts), dropped)
    return {
        "positions": positions,
        "total_chunks": total_chunks,
        "owned": owned,
        "images": images_per_chunk,
        "feature_dim": feature_dim,
    }


def stage_detections(builder: StageContext) -> Dict[str, object]:
    """Stage 1: the shard's images with their regions and tag queries, one
    ``work/detections`` file per chunk; the summary of the shard's chunks (``_SUCCESS.json``)."""
    directory = os.path.join(builder.work, "detections")
    success = os.path.join(directory, "_SUCCESS.json")
    done = read_json(success)
    if done is not None:
        return done
    os.makedirs(directory, exist_ok=True)
    reader = _reader(builder, directory)
    clock = Clock()
    rows = _read_chunks(builder, directory, reader)
    done = _summary(builder, directory, reader.positions)
    atomic_write_json(success, done)
    add_timing(builder.timings, "detections", clock, rows, "images")
    return done
