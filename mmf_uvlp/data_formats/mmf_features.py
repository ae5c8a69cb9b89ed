"""MMF region-feature files, as MMF 1.0.0rc10's feature readers read them.

- LMDB (``LMDBFeatureReader``): one pickled dict per image under its key (the feature
  file name without ``.npy``), plus ``b"keys"``: the pickled list of all image keys
  (bytes). Each dict holds ``features`` (N, D) float32, ``bbox`` (N, 4) float32
  [x1, y1, x2, y2] pixels, ``num_boxes``, ``image_width``, ``image_height``,
  ``objects`` (N,) class ids, ``cls_prob`` (N, C + 1) float32 and ``image_id``.
- npy folder (``PaddedFasterRCNNFeatureReader``): ``<name>.npy`` (N, D) float32 and
  ``<name>_info.npy``, a pickled dict with the same fields except ``features``.

Readers stream one image at a time and raise :class:`FormatError` on bad records
(non-finite features included). Pickled values are read by a restricted unpickler (plain
data and numpy arrays: see :mod:`mmf_uvlp.utils.safe_loading`), and an image name never
leads outside its npy folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mmf_uvlp.errors import FormatError, OutsideFolderError
from mmf_uvlp.utils import lmdb_envs, safe_loading

KEYS_ENTRY = b"keys"
INFO_FIELDS = ("bbox", "num_boxes", "image_width", "image_height", "objects", "cls_prob")
BOX_TOLERANCE = 1.0


def validate_record(
    record: dict,
    path: str | os.PathLike,
    key: str,
    feature_dim: int | None = None,
    num_classes: int | None = None,
    require_features: bool = True,
) -> dict:
    """Check one per-image feature dict; returns it unchanged.

    ``num_classes`` counts the background column of ``cls_prob``.
    """
    if not isinstance(record, dict):
        raise FormatError(path, "record", "a dict", type(record).__name__, key=key)
    fields = INFO_FIELDS + (("features",) if require_features else ())
    missing = [f for f in fields if f not in record]
    if missing:
        raise FormatError(path, missing[0], f"fields {list(fields)}", sorted(record), key=key)
    n = record["num_boxes"]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise FormatError(path, "num_boxes", "an integer >= 0", n, key=key)
    w, h = record["image_width"], record["image_height"]
    for name, value in (("image_width", w), ("image_height", h)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise FormatError(path, name, "an integer >= 1", value, key=key)
    if require_features:
        features = record["features"]
        if (
            not isinstance(features, np.ndarray)
            or features.dtype != np.float32
            or features.ndim != 2
            or features.shape[0] != n
        ):
            raise FormatError(
                path, "features", f"a float32 array of shape ({n}, D)", _shape(features), key=key
            )
        if feature_dim is not None and features.shape[1] != feature_dim:
            raise FormatError(path, "features", f"D = {feature_dim}", features.shape[1], key=key)
        finite = np.isfinite(features)
        if not finite.all():
            raise FormatError(
                path, "features", "finite values", non_finite(features, finite), key=key
            )
    bbox = np.asarray(record["bbox"])
    if bbox.shape != (n, 4) or not np.isfinite(bbox).all():
        raise FormatError(path, "bbox", f"a finite array of shape ({n}, 4)", _shape(bbox), key=key)
    limits = np.array([w, h, w, h], dtype=np.float64) + BOX_TOLERANCE
    if (
        (bbox < -BOX_TOLERANCE).any()
        or (bbox > limits).any()
        or (bbox[:, 2] < bbox[:, 0]).any()
        or (bbox[:, 3] < bbox[:, 1]).any()
    ):
        raise FormatError(
            path,
            "bbox",
            f"boxes x1<=x2, y1<=y2 inside the {w}x{h} image",
            bbox.tolist()[:2],
            key=key,
        )
    objects = np.asarray(record["objects"])
    if objects.shape != (n,) or not np.issubdtype(objects.dtype, np.integer):
        raise FormatError(path, "objects", f"{n} integer class ids", _shape(objects), key=key)
    cls_prob = np.asarray(record["cls_prob"])
    if cls_prob.ndim != 2 or cls_prob.shape[0] != n or not np.isfinite(cls_prob).all():
        raise FormatError(
            path, "cls_prob", f"a finite array of shape ({n}, C)", _shape(cls_prob), key=key
        )
    if num_classes is not None and cls_prob.shape[1] != num_classes:
        raise FormatError(path, "cls_prob", f"C = {num_classes}", cls_prob.shape[1], key=key)
    if n and ((objects < 0).any() or (objects >= cls_prob.shape[1]).any()):
        raise FormatError(
            path,
            "objects",
            f"class ids in [0, {cls_prob.shape[1] - 1})",
            objects.tolist()[:5],
            key=key,
        )
    return record


def non_finite(features: np.ndarray, finite: np.ndarray) -> str:
    """What a feature array holds instead of finite values, e.g. ``2 NaN, 1 inf (row 3)``."""
    nan = int(np.isnan(features).sum())
    inf = int((~finite).sum()) - nan
    row = int(np.argwhere(~finite)[0][0])
    found = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "inf")) if n)
    return f"{found} (first in row {row})"


def _shape(value) -> str:
    return str(getattr(value, "shape", type(value).__name__))


class LmdbFeatures:
    """Read an MMF feature LMDB: iterate in key order or look up one image.

    A path that is no LMDB raises ``mmf_uvlp.errors.LmdbOpenError``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        feature_dim: int | None = None,
        num_classes: int | None = None,
    ):
        self.path = str(path)
        self.feature_dim, self.num_classes = feature_dim, num_classes
        self.env = lmdb_envs.acquire(self.path)
        self._closed = False
        try:
            self._keys = self._read_keys()
        except FormatError:
            self.close()
            raise

    def _read_keys(self) -> list[str]:
        with self.env.begin(write=False) as txn:
            raw = txn.get(KEYS_ENTRY)
        if raw is None:
            raise FormatError(self.path, "keys", "a b'keys' entry listing the image keys")
        keys = self._unpickle(raw, "keys")
        if not isinstance(keys, list) or not all(isinstance(k, bytes) for k in keys):
            raise FormatError(self.path, "keys", "a pickled list of bytes", type(keys).__name__)
        return [k.decode("utf-8") for k in keys]

    def _unpickle(self, raw: bytes, key: str):
        return safe_loading.restricted_loads(raw, self.path, arrays=True, key=key)

    def keys(self) -> list[str]:
        return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: str) -> bool:
        with self.env.begin(write=False) as txn:
            return txn.get(key.encode("utf-8")) is not None

    def __getitem__(self, key: str) -> dict:
        with self.env.begin(write=False) as txn:
            raw = txn.get(key.encode("utf-8"))
        if raw is None:
            raise KeyError(f"{key!r} not in {self.path}")
        record = self._unpickle(raw, key)
        return validate_record(record, self.path, key, self.feature_dim, self.num_classes)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        for key in self._keys:
            yield key, self[key]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            lmdb_envs.release(self.path)

    def __enter__(self) -> "LmdbFeatures":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_lmdb(
    path: str | os.PathLike, feature_dim: int | None = None, num_classes: int | None = None
) -> Iterator[tuple[str, dict]]:
    """Stream (key, record) pairs of an MMF feature LMDB in the order of ``b"keys"``."""
    with LmdbFeatures(path, feature_dim, num_classes) as db:
        yield from db


def load_npy(
    folder: str | os.PathLike,
    name: str,
    feature_dim: int | None = None,
    num_classes: int | None = None,
) -> dict:
    """One image of an npy feature folder: its info dict plus ``features``."""
    try:
        feature_path = safe_loading.resolve_inside(folder, f"{name}.npy")
        info_path = safe_loading.resolve_inside(folder, f"{name}_info.npy")
    except OutsideFolderError as e:
        raise FormatError(
            folder, "name", safe_loading.stays_inside("the folder", e.reason), name, key=name
        ) from None
    features = safe_loading.load_npy(feature_path)
    if features.dtype.hasobject:
        raise FormatError(feature_path, "features", "a plain float32 .npy array", "an object array")
    info = safe_loading.load_npy(info_path)
    info = info.item() if info.dtype.hasobject and info.shape == () else info
    if not isinstance(info, dict):
        raise FormatError(info_path, "info", "a dict", type(info).__name__)
    validate_record(info, info_path, name, require_features=False, num_classes=num_classes)
    record = dict(info, features=features)
    return validate_record(record, feature_path, name, feature_dim, num_classes)


def read_npy_folder(
    folder: str | os.PathLike, feature_dim: int | None = None, num_classes: int | None = None
) -> Iterator[tuple[str, dict]]:
    """Stream (name, record) pairs of an npy feature folder in sorted name order."""
    names = sorted(
        p.name[: -len(".npy")]
        for p in Path(folder).glob("*.npy")
        if not p.name.endswith("_info.npy")
    )
    for name in names:
        yield name, load_npy(folder, name, feature_dim, num_classes)


class FeatureNames:
    """Which ``feature_path`` names (``<key>.npy``) MMF's FeaturesDatabase finds in its
    feature locations, checked when a dataset is built rather than when training reads
    the image.

    ``paths``: MMF's feature locations; one ending in ``.lmdb`` is an LMDB (a name is there
    when its key, or the number after its last ``_``, is in ``b"keys"``, as MMF's
    ``LMDBFeatureReader`` looks it up), any other an npy folder (``<key>.npy`` inside it).
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = [str(p) for p in paths]
        self._keys: dict[str, set[str]] = {}
        for path in self.paths:
            if path.endswith(".lmdb"):
                with LmdbFeatures(path) as db:
                    self._keys[path] = set(db.keys())

    def check(
        self,
        feature_path: str,
        source: str | os.PathLike,
        field: str,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        """Raise a :class:`FormatError` naming ``source`` (the data file holding the name),
        ``line``/``key`` and ``field`` unless every location holds ``feature_path``."""
        name = feature_path[: -len(".npy")] if feature_path.endswith(".npy") else feature_path
        reason = safe_loading.unsafe_name(feature_path)
        if reason is not None:
            raise FormatError(
                source,
                field,
                safe_loading.stays_inside("the features", reason),
                name,
                line=line,
                key=key,
            )
        if not feature_path.endswith(".npy"):
            raise FormatError(
                source, field, "a name ending in .npy", feature_path, line=line, key=key
            )
        for path in self.paths:
            keys = self._keys.get(path)
            if keys is None:
                try:
                    found = safe_loading.resolve_inside(path, feature_path).is_file()
                except OutsideFolderError as e:
                    raise FormatError(
                        source,
                        field,
                        safe_loading.stays_inside(path, e.reason),
                        name,
                        line=line,
                        key=key,
                    ) from None
            else:
                found = _lmdb_holds(keys, feature_path)
            if not found:
                raise FormatError(
                    source, field, f"an image of the features {path}", name, line=line, key=key
                )


def _lmdb_holds(keys: set[str], feature_path: str) -> bool:
    """Whether MMF's LMDBFeatureReader finds ``feature_path``: the number after the last
    ``_`` as a key, else the name itself."""
    name = os.path.normpath(feature_path).split(".npy")[0]
    try:
        if str(int(name.split("_")[-1])) in keys:
            return True
    except ValueError:
        pass
    return name in keys
