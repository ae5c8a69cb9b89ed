"""Convert VinVL detector output into MMF's region-feature files (``uvlp-convert-features``).

Inputs, one image a row (``mmf_uvlp.data_formats.vinvl`` and ``.vinvl_raw``):

- the released VinVL files: ``predictions.tsv`` (sizes, boxes, classes) and ``features.tsv``
  (``num_boxes x (D + 6)`` float32: the last 6 geometry dims are dropped), in the same row
  order; or
- a detector's raw output (scene_graph_benchmark's ``predictions.tsv``, the features embedded
  in the objects) with the data set's ``hw.tsv`` for the image sizes;

and the detector's label map (json or tsv, ``mmf_uvlp.data_formats.labelmap``), which gives
the class ids MMF stores; when every object names its class, none is needed: the ids follow
the names' sorted order and are written to ``OUT/labelmap.tsv``. Output, in the layout MMF's ``FeaturesDatabase`` reads
(``mmf_uvlp.data_formats.mmf_features``), chosen as MMF chooses its reader, by the name:

- ``OUT.lmdb`` (a folder ending in ``.lmdb``): one pickled dict per image under its key, and
  ``b"keys"``, the list of keys in input order;
- any other ``OUT``: a folder of ``<key>.npy`` (the (N, D) features) and ``<key>_info.npy``.

Each image's dict holds ``features`` (N, D) float32, ``bbox`` (N, 4) float32 pixels,
``num_boxes``, ``image_width``, ``image_height``, ``objects`` (N,) class ids and ``cls_prob``
(N, C + 1): the detector's ``scores_all`` when its rows have them, else each region's
``conf`` in the column of its class and 0 elsewhere; the LMDB's dicts also hold ``image_id``.
The key is the image id of the detector row (MMF looks an image up as ``<key>.npy``).

The conversion streams the rows and is resumable: every ``commit_every`` images the written
images are committed and ``OUT/.convert/state.json`` records how far the inputs were read
(rows, byte offsets, counts; ``keys.tsv`` beside it lists the keys written). Run the same
command again after an interruption, even ``kill -9``, and it goes on from the last commit;
the result is the same as an uninterrupted run. Settings or inputs that differ from those of
the interrupted run are refused (``restart=True`` starts over). Bad rows stop the conversion
(``on_error="raise"``) or are skipped and counted (``"skip"``), each error naming file,
line and field; a features row of another image than its predictions row is always fatal.
At the end every image is read back through MMF's own ``FeaturesDatabase`` and compared with
what was written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pickle
import shutil
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import lmdb
import numpy as np
from tqdm import tqdm

from mmf_uvlp.errors import FormatError, LmdbWriteError
from mmf_uvlp.utils.atomic import atomic_open
from mmf_uvlp.utils.error_policy import ErrorPolicy
from mmf_uvlp.utils.file_signature import file_signature
from mmf_uvlp.utils.output_folder import refuse_foreign_folder
from mmf_uvlp.data_formats.labelmap import (
    NAMED_LABELMAP,
    LabelMap,
    labelmap_of_names,
    load_labelmap,
    write_labelmap,
)
from mmf_uvlp.data_formats.mmf_features import KEYS_ENTRY, LmdbFeatures, load_npy
from mmf_uvlp.data_formats.vinvl import (
    BOX_TOLERANCE,
    GEOMETRY_DIMS,
    duplicate_id_error,
    infer_feature_dim,
    parse_features_row,
)
from mmf_uvlp.data_formats.vinvl_raw import (
    DetectorRow,
    ImageSizes,
    infer_embedded_feature_dim,
    parse_detector_row,
)

logger = logging.getLogger(__name__)

STATE_DIR = ".convert"
PICKLE_PROTOCOL = 4
LMDB_MAP_SIZE = 1 << 36  # grown (doubled) whenever a commit does not fit
STATE_VERSION = 1


@dataclass
class Sources:
    """What to convert: a ``predictions.tsv`` with either ``features`` (the released
    ``features.tsv``) or ``hw`` (a raw output's ``hw.tsv``), and the label map."""

    predictions: str
    labelmap: Optional[str] = None  # None: every class is a name (labelmap_of_names)
    features: Optional[str] = None
    hw: Optional[str] = None
    feature_dim: Optional[int] = None  # D; None: the majority of the first rows
    box_tolerance: float = BOX_TOLERANCE

    def check(self) -> None:
        if self.features and self.hw:
            raise ValueError(
                "give features (a released features.tsv) or hw (the hw.tsv of a "
                "detector's raw output), not both"
            )
        for path in (self.predictions, self.labelmap, self.features, self.hw):
            if path and not os.path.isfile(path):
                raise FileNotFoundError(f"input not found: {path}")


@dataclass
class Summary:
    """The outcome of a conversion (also its resumable state)."""

    out: str
    layout: str
    rows: int = 0
    images: int = 0
    regions: int = 0
    max_boxes: int = 0
    feature_dim: Optional[int] = None
    num_columns: int = 0
    skipped: Dict[str, Any] = dataclasses.field(default_factory=dict)
    offsets: Dict[str, int] = dataclasses.field(default_factory=dict)
    complete: bool = False
    verified: int = 0
    resumed: bool = False


def layout_of(out: str) -> str:
    """``lmdb`` for a name ending in ``.lmdb`` (what MMF's FeatureReader reads as an LMDB),
    else ``npy``."""
    return "lmdb" if out.rstrip("/").endswith(".lmdb") else "npy"


def check_key(key: str, layout: str, path: str, line: int) -> None:
    """An image id MMF can look up as ``<key>.npy`` (and, for a folder, a plain file name)."""
    if ".npy" in key:
        raise FormatError(
            path,
            "image_id",
            "an image id without '.npy' (MMF cuts a looked-up path at its first '.npy')",
            key,
            line=line,
        )
    if layout == "npy" and (
        "/" in key or "\\" in key or key.startswith(".") or key.endswith("_info")
    ):
        raise FormatError(
            path,
            "image_id",
            "a file name for the .npy folder (no '/' or '\\', "
            "not starting with '.', not ending in '_info')",
            key,
            line=line,
        )


def mmf_record(
    row: DetectorRow, features: np.ndarray, labelmap: LabelMap, path: str, line: int
) -> Dict[str, Any]:
    """The per-image dict of MMF's feature files."""
    prediction = row.prediction
    n = prediction.num_boxes
    ids = np.array(
        [
            labelmap.id_of(o.cls, path, line, f"objects[{k}].class")
            for k, o in enumerate(prediction.objects)
        ],
        dtype=np.int64,
    ).reshape(n)
    if row.scores_all is not None:
        cls_prob = row.scores_all.astype(np.float32)
    else:
        cls_prob = np.zeros((n, labelmap.num_columns), dtype=np.float32)
        cls_prob[np.arange(n), ids] = [o.conf for o in prediction.objects]
    return {
        "image_id": prediction.image_id,
        "image_width": prediction.image_w,
        "image_height": prediction.image_h,
        "num_boxes": n,
        "objects": ids,
        "cls_prob": cls_prob,
        "bbox": np.array([o.rect for o in prediction.objects], dtype=np.float32).reshape(n, 4),
        "features": np.ascontiguousarray(features, dtype=np.float32),
    }


# ---------------------------------------------------------------- reading the rows
Item = Tuple[int, Dict[str, int], str, Union[Tuple[str, Dict[str, Any]], FormatError]]


class _Rows:
    """The input rows from given byte offsets: ``(line, offsets after it, source, (key,
    record) or FormatError)``."""

    def __init__(
        self,
        sources: Sources,
        labelmap: LabelMap,
        sizes: Optional[ImageSizes],
        feature_dim: int,
        layout: str,
    ):
        self.sources, self.labelmap, self.sizes = sources, labelmap, sizes
        self.feature_dim, self.layout = feature_dim, layout

    def read(self, line: int, offsets: Dict[str, int]) -> Iterator[Item]:
        src = self.sources
        with (
            open(src.predictions, "rb") as predictions,
            open(src.features, "rb") if src.features else contextlib.nullcontext() as features,
        ):
            predictions.seek(offsets.get("predictions", 0))
            if features:
                features.seek(offsets.get("features", 0))
            while True:
                raw = predictions.readline()
                features_raw = features.readline() if features else None
                if not raw:
                    if features_raw:
                        raise FormatError(
                            src.features,
                            "row",
                            f"{line} rows (as many as {src.predictions})",
                            "more rows",
                            line=line + 1,
                        )
                    return
                line += 1
                after = {"predictions": predictions.tell()}
                if src.features:
                    after["features"] = features.tell()
                source, item = self._image(raw, features_raw, line)
                yield line, after, source, item

    def _image(self, raw: bytes, features_raw: Optional[bytes], line: int):
        src = self.sources
        try:
            row = parse_detector_row(
                raw,
                src.predictions,
                line,
                self.sizes,
                self.labelmap,
                self.feature_dim,
                src.box_tolerance,
                with_features=features_raw is None,
            )
            check_key(row.prediction.image_id, self.layout, src.predictions, line)
        except FormatError as err:
            return "predictions", err
        if features_raw is not None:
            try:
                tsv = parse_features_row(
                    features_raw, src.features, line, self.feature_dim, row.prediction
                )
            except FormatError as err:
                if err.field == "image_id":
                    raise  # rows out of step: nothing after this can be trusted
                return "features", err
            features = tsv.features[:, :-GEOMETRY_DIMS]
        elif row.features is not None:
            features = row.features
        elif row.prediction.num_boxes:
            return "predictions", FormatError(
                src.predictions,
                "objects[0].feature",
                "the region features embedded in every "
                "object (scene_graph_benchmark: TEST.OUTPUT_FEATURE True, 'feature' in "
                "TEST.TSV_SAVE_SUBSET)",
                None,
                line=line,
            )
        else:
            features = np.zeros((0, self.feature_dim), dtype=np.float32)
        record = mmf_record(row, features, self.labelmap, src.predictions, line)
        return "predictions", (row.prediction.image_id, record)


# ---------------------------------------------------------------- writers
class _LmdbWriter:
    def __init__(self, out: str):
        os.makedirs(out, exist_ok=True)
        self.out = out
        try:
            self.env = lmdb.open(out, map_size=LMDB_MAP_SIZE, subdir=True, meminit=False)
        except lmdb.Error as error:
            raise LmdbWriteError(out, error) from error

    def write(self, records: List[Tuple[str, Dict[str, Any]]]) -> None:
        blobs = [
            (key.encode("utf-8"), pickle.dumps(record, protocol=PICKLE_PROTOCOL))
            for key, record in records
        ]
        self._commit(blobs)

    def _commit(self, blobs: List[Tuple[bytes, bytes]]) -> None:
        """``blobs`` written in one transaction, on disk on return; a write the disk refuses
        (full, an I/O error) is an :class:`LmdbWriteError` naming the file."""
        try:
            while True:
                try:
                    with self.env.begin(write=True) as txn:
                        for key, blob in blobs:
                            txn.put(key, blob)
                    break
                except lmdb.MapFullError:
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)
            self.env.sync(True)
        except lmdb.Error as error:
            raise LmdbWriteError(self.out, error) from error

    def finish(self, keys: List[str]) -> None:
        self._commit(
            [
                (
                    KEYS_ENTRY,
                    pickle.dumps([k.encode("utf-8") for k in keys], protocol=PICKLE_PROTOCOL),
                )
            ]
        )

    def close(self) -> None:
        self.env.close()


class _NpyWriter:
    INFO_FIELDS = ("bbox", "num_boxes", "image_width", "image_height", "objects", "cls_prob")

    def __init__(self, out: str):
        self.out = out
        os.makedirs(out, exist_ok=True)

    def write(self, records: List[Tuple[str, Dict[str, Any]]]) -> None:
        for key, record in records:
            info = {field: record[field] for field in self.INFO_FIELDS}
            self._save(f"{key}_info.npy", info, allow_pickle=True)
            self._save(f"{key}.npy", record["features"], allow_pickle=False)

    def _save(self, name: str, value: Any, allow_pickle: bool) -> None:
        path = os.path.join(self.out, name)
        with atomic_open(path, "wb", temporary=path + ".tmp", fsync=True) as handle:
            np.save(handle, value, allow_pickle=allow_pickle)

    def finish(self, keys: List[str]) -> None:
        """Nothing to add: MMF finds each image by its file name."""

    def close(self) -> None:
        """Every file is closed when written."""


# ---------------------------------------------------------------- state
class _State:
    """``OUT/.convert/``: ``state.json`` (a :class:`Summary` and the fingerprint) and
    ``keys.tsv`` (``key\\tline`` of every image written, in order)."""

    def __init__(self, out: str):
        self.dir = os.path.join(out, STATE_DIR)
        self.path = os.path.join(self.dir, "state.json")
        self.keys_path = os.path.join(self.dir, "keys.tsv")

    def load(self) -> Optional[Dict[str, Any]]:
        if not os.path.exists(self.path):
            return None
        with open(self.path, encoding="utf-8") as handle:
            return json.load(handle)

    def keys(self, count: int) -> Dict[str, int]:
        """The first ``count`` keys written (a longer file, cut by an interruption after a
        write and before its state, is truncated)."""
        keys: Dict[str, int] = {}
        with open(self.keys_path, "r+b") as handle:
            for _ in range(count):
                key, _, line = handle.readline().decode("utf-8").rstrip("\n").partition("\t")
                keys[key] = int(line)
            handle.truncate(handle.tell())
        return keys

    def start(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        open(self.keys_path, "wb").close()

    def append_keys(self, keys: List[Tuple[str, int]]) -> None:
        with open(self.keys_path, "ab") as handle:
            handle.write("".join(f"{key}\t{line}\n" for key, line in keys).encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def save(self, summary: Summary, fingerprint: str) -> None:
        data = {"version": STATE_VERSION, "fingerprint": fingerprint, **dataclasses.asdict(summary)}
        data.pop("resumed")
        with atomic_open(
            self.path, "w", temporary=self.path + ".tmp", fsync=True, encoding="utf-8"
        ) as handle:
            json.dump(data, handle, indent=1)


def _fingerprint(sources: Sources, layout: str, on_error: str, feature_dim: int) -> str:
    data = {
        "layout": layout,
        "on_error": on_error,
        "feature_dim": feature_dim,
        "box_tolerance": sources.box_tolerance,
    }
    for name in ("predictions", "features", "hw", "labelmap"):
        path = getattr(sources, name)
        data[name] = file_signature(path) if path else None
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _prepare_out(out: str, state: _State, fingerprint: str, restart: bool) -> Optional[dict]:
    """The saved state to resume from (None: start afresh), after the checks."""
    if restart and os.path.lexists(out):
        if os.path.islink(out):
            raise FileExistsError(
                f"{out} is a symbolic link (to {os.path.realpath(out)}); "
                "--restart deletes files only in a folder of its own: give "
                "the folder itself as the output, or choose another output"
            )
        if not os.path.isdir(state.dir):
            raise FileExistsError(
                f"{out} exists and was not written by convert_features "
                f"(no {STATE_DIR}/ in it): remove it yourself or choose "
                "another output"
            )
        _remove_written(out, state)
        return None
    saved = state.load()
    if saved is None:
        refuse_foreign_folder(out, STATE_DIR, "convert_features")
        return None
    if saved.get("fingerprint") != fingerprint or saved.get("version") != STATE_VERSION:
        raise ValueError(
            f"{out} holds a conversion of other inputs or settings "
            f"({state.path}); run with --restart to convert again into it, or "
            "choose another output"
        )
    return saved


def _remove_written(out: str, state: _State) -> None:
    """Delete what a conversion wrote into ``out``: the files of every key of its
    ``keys.tsv`` (an LMDB's two files), then its state; any other file stays."""
    if layout_of(out) == "lmdb":
        names = ["data.mdb", "lock.mdb"]
    else:
        names = []
        if os.path.exists(state.keys_path):
            with open(state.keys_path, "rb") as handle:
                for row in handle:
                    key = row.decode("utf-8").rstrip("\n").partition("\t")[0]
                    if key:
                        names += [f"{key}.npy", f"{key}_info.npy"]
        names += [f"{name}.tmp" for name in names]
    for name in names:
        path = os.path.join(out, name)
        if os.path.isfile(path) or os.path.islink(path):
            os.remove(path)
    shutil.rmtree(state.dir)
    logger.info("%s: --restart removed the files of the earlier conversion", out)


def _feature_dim(sources: Sources) -> int:
    if sources.features:
        found = infer_feature_dim(sources.features)
    else:
        found = infer_embedded_feature_dim(sources.predictions)
    dim = sources.feature_dim or found
    if dim is None:
        where = sources.features or sources.predictions
        raise ValueError(
            f"{where}: no region features found in the first rows (a detector's "
            "raw output needs TEST.OUTPUT_FEATURE True and 'feature' in "
            "TEST.TSV_SAVE_SUBSET; or give the released features.tsv)"
        )
    return dim


def convert_features(
    sources: Sources,
    out: str,
    on_error: str = "raise",
    commit_every: int = 256,
    restart: bool = False,
    progress: bool = True,
    verify: bool = True,
) -> Summary:
    """Convert (or resume converting) ``sources`` into ``out``; returns the summary."""
    sources.check()
    if commit_every < 1:
        raise ValueError(f"commit_every must be >= 1, got {commit_every}")
    layout = layout_of(out)
    labelmap = (
        load_labelmap(sources.labelmap)
        if sources.labelmap
        else labelmap_of_names(sources.predictions)
    )
    sizes = ImageSizes(sources.hw) if sources.hw else None
    feature_dim = _feature_dim(sources)
    fingerprint = _fingerprint(sources, layout, on_error, feature_dim)
    state = _State(out)
    saved = _prepare_out(out, state, fingerprint, restart)
    if saved is not None and saved["complete"]:
        summary = _summary_of(saved)
        summary.resumed = True
        logger.info("%s: already converted from these inputs (%d images)", out, summary.images)
        return summary
    if saved is None:
        summary = Summary(out, layout, feature_dim=feature_dim, num_columns=labelmap.num_columns)
        state.start()
        state.save(summary, fingerprint)
        seen: Dict[str, int] = {}
    else:
        summary = _summary_of(saved)
        summary.resumed = True
        seen = state.keys(summary.images)
        logger.info(
            "%s: resuming after row %d (%d images converted)", out, summary.rows, summary.images
        )
    policy = ErrorPolicy.from_dict(summary.skipped, on_error)
    writer = _LmdbWriter(out) if layout == "lmdb" else _NpyWriter(out)
    try:
        _convert_rows(
            _Rows(sources, labelmap, sizes, feature_dim, layout),
            summary,
            seen,
            policy,
            writer,
            state,
            fingerprint,
            commit_every,
            progress,
        )
        writer.finish(list(seen))
    finally:
        writer.close()
    if not sources.labelmap:
        write_labelmap(labelmap, os.path.join(out, NAMED_LABELMAP))
        logger.info(
            "%s: class ids from the names' sorted order, written to %s; give it as "
            "--labelmap to convert other files with the same ids",
            out,
            os.path.join(out, NAMED_LABELMAP),
        )
    summary.complete = True
    state.save(summary, fingerprint)
    if verify:
        summary.verified = verify_with_mmf(out, list(seen), summary.max_boxes, progress)
    return summary


def _summary_of(saved: Dict[str, Any]) -> Summary:
    fields = {f.name for f in dataclasses.fields(Summary)}
    return Summary(**{k: v for k, v in saved.items() if k in fields})


def _convert_rows(
    rows: _Rows,
    summary: Summary,
    seen: Dict[str, int],
    policy: ErrorPolicy,
    writer: Any,
    state: _State,
    fingerprint: str,
    commit_every: int,
    progress: bool,
) -> None:
    pending: List[Tuple[str, int, Dict[str, Any]]] = []
    predictions = rows.sources.predictions
    bar = tqdm(
        total=os.path.getsize(predictions),
        initial=summary.offsets.get("predictions", 0),
        unit="B",
        unit_scale=True,
        desc=f"converting {os.path.basename(predictions)}",
        disable=not progress,
    )

    def commit(offsets: Dict[str, int]) -> None:
        # the keys first: every file written is in keys.tsv (what --restart deletes)
        state.append_keys([(key, line) for key, line, _ in pending])
        writer.write([(key, record) for key, _, record in pending])
        summary.offsets = offsets
        summary.skipped = policy.to_dict()
        state.save(summary, fingerprint)
        pending.clear()

    offsets = summary.offsets
    for line, offsets, source, item in rows.read(summary.rows, summary.offsets):
        bar.update(offsets["predictions"] - bar.n)
        summary.rows = line
        if isinstance(item, FormatError):
            policy.handle(source, item)
        else:
            key, record = item
            if key in seen:
                policy.handle(source, duplicate_id_error(predictions, line, key, seen[key]))
            else:
                seen[key] = line
                pending.append((key, line, record))
                summary.images += 1
                summary.regions += record["num_boxes"]
                summary.max_boxes = max(summary.max_boxes, record["num_boxes"])
        if len(pending) >= commit_every:
            commit(offsets)
    commit(offsets)
    bar.close()
    if not summary.images:
        raise ValueError(
            f"no image converted from {predictions}: {summary.rows} rows"
            + (f", skipped {dict(policy.counts)}" if policy.counts else "")
        )


# ---------------------------------------------------------------- reading back through MMF
def _mmf_features_database(out: str, max_features: int):
    from omegaconf import OmegaConf

    from mmf.datasets.databases.features_database import FeaturesDatabase

    config = OmegaConf.create(
        {
            "max_features": max(1, max_features),
            "fast_read": False,
            "return_features_info": True,
            "depth_first": False,
        }
    )
    return FeaturesDatabase(config, out)


def verify_with_mmf(out: str, keys: List[str], max_boxes: int, progress: bool = True) -> int:
    """Read every image through MMF's own ``FeaturesDatabase`` (padded to ``max_boxes``
    regions) and compare it with the file's record, read and checked by the project's reader;
    returns the number of images compared (all of them, or a FormatError)."""
    from mmf_uvlp.utils import lmdb_envs

    out = os.path.abspath(out)
    ours = LmdbFeatures(out) if layout_of(out) == "lmdb" else None
    try:
        read = (lambda key: ours[key]) if ours is not None else (lambda key: load_npy(out, key))
        database = _mmf_features_database(out, max_boxes)
        for key in tqdm(
            keys,
            desc=f"reading {os.path.basename(out.rstrip('/'))} back through MMF",
            disable=not progress,
        ):
            _compare(out, key, read(key), database.from_path(f"{key}.npy"))
    finally:
        if ours is not None:
            ours.close()
            lmdb_envs.release(out)  # the environment MMF's reader acquired
    return len(keys)


def _compare(out: str, key: str, expected: Dict[str, Any], item: Dict[str, Any]) -> None:
    n = int(expected["num_boxes"])
    features = item["image_feature_0"].numpy()
    info = item["image_info_0"]
    checks = {
        "features": np.array_equal(features[:n], expected["features"]) and not features[n:].any(),
        "num_boxes": int(info["max_features"]) == n,
        "bbox": np.array_equal(np.asarray(info["bbox"]), expected["bbox"]),
        "objects": np.array_equal(np.asarray(info["objects"]), expected["objects"]),
        "image_width": info["image_width"] == expected["image_width"],
        "image_height": info["image_height"] == expected["image_height"],
    }
    for field, same in checks.items():
        if not same:
            raise FormatError(
                out,
                field,
                f"MMF's FeaturesDatabase to read back the {field} "
                f"written for {key!r} (MMF resolves '{key}.npy' to another "
                "image?)",
                "something else",
                key=key,
            )
