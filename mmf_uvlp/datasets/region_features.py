"""Region features of the plugin's pre-training datasets, read without MMF's padding.

MMF's ``FeaturesDatabase`` hands every image over as a zeroed ``(max_features, D)`` array
with its rows copied in; the plugin's datasets pad each batch to its longest instead
(:mod:`mmf_uvlp.datasets.collate`), so :class:`RegionFeaturesDatabase` reads the same
files (one location of ``dataset_config.<name>.features``: an MMF feature LMDB or an
``.npy`` folder, see :mod:`mmf_uvlp.data_formats.mmf_features`), finds an image by the
same ``feature_path`` rules as MMF's readers, and returns its first ``max_features`` real
rows only, with the info fields MMF returns (``bbox``, ``objects``, ``image_width``,
``image_height``, ...; ``max_features``: the image's row count).

Loading is as safe as MMF's readers under the plugin's fixes: LMDB values and ``.npy``
object arrays go through the restricted unpickler (no code runs), a name never leads out of
its npy folder, each process reads an LMDB through its own environment (DataLoader
workers, spawned ones included), and a value that is not a record, a missing key or a
non-finite feature is a :class:`~mmf_uvlp.errors.FormatError` naming the
file and the image.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, FrozenSet, Tuple

import numpy as np
import torch

from mmf_uvlp.errors import FormatError, OutsideFolderError
from mmf_uvlp.data_formats.mmf_features import KEYS_ENTRY, non_finite
from mmf_uvlp.utils import lmdb_envs, safe_loading


def check_finite(features: np.ndarray, path: str, key: str) -> None:
    """Raise a FormatError naming ``path`` and ``key`` unless every value is finite.

    One sum in float64 decides (float32 values cannot overflow it, and a NaN or inf
    anywhere makes it non-finite); only a non-finite sum looks at every value.
    """
    if features.size == 0 or math.isfinite(float(features.sum(dtype=np.float64))):
        return
    finite = np.isfinite(features)
    if not finite.all():
        raise FormatError(path, "features", "finite values", non_finite(features, finite), key=key)


class RegionFeaturesDatabase:
    """The images of one feature location (``path``), each its first ``max_features``
    rows (``from_path``, named and looked up as by MMF's ``FeaturesDatabase``)."""

    def __init__(self, path: str, max_features: int):
        locations = [location for location in str(path).split(",") if location]
        if len(locations) != 1:
            raise ValueError(
                f"region features: one feature location (an LMDB or an .npy "
                f"folder) per dataset split, got {len(locations)}: {path!r}"
            )
        from mmf.utils.general import get_absolute_path

        self.path = get_absolute_path(locations[0])
        self.paths = [self.path]
        self.max_features = int(max_features)
        self.is_lmdb = self.path.endswith(".lmdb")
        self._env: Any = None
        self._index: FrozenSet[bytes] | None = None
        if self.is_lmdb:
            self._env = lmdb_envs.ProcessLocalEnvironment(self.path)
        elif not os.path.isdir(self.path):
            raise FileNotFoundError(
                f"region features {self.path}: expected an MMF feature "
                "LMDB (a path ending in .lmdb) or a folder of .npy files"
            )

    def from_path(self, feature_path: str) -> Dict[str, Any]:
        """``{"image_feature_0": (n, D) float32 tensor, "image_info_0": info}`` of the image
        named ``feature_path`` (``<key>.npy``), ``n`` = min(its rows, ``max_features``)."""
        if "genome" in feature_path:  # as MMF's FeaturesDatabase.from_path
            feature_path = str(int(feature_path.split("_")[-1].split(".")[0])) + ".npy"
        if self.is_lmdb:
            features, info, name = self._lmdb_record(feature_path)
        else:
            features, info, name = self._npy_record(feature_path)
        if not isinstance(features, np.ndarray) or features.ndim != 2:
            raise FormatError(
                self.path,
                "features",
                "a 2-d array (N, D)",
                getattr(features, "shape", type(features).__name__),
                key=name,
            )
        rows = features[: self.max_features]
        check_finite(rows, self.path, name)
        info = dict(info)
        info["max_features"] = torch.tensor(features.shape[0], dtype=torch.long)
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if not rows.flags.writeable:  # e.g. an array read from a pickle's buffer
            rows = rows.copy()
        return {"image_feature_0": torch.from_numpy(rows), "image_info_0": info}

    # ---------------------------------------------------------------- LMDB
    def _keys(self) -> FrozenSet[bytes]:
        """The image keys of ``b"keys"``, read once per database."""
        if self._index is None:
            with self._env.begin(write=False) as txn:
                raw = txn.get(KEYS_ENTRY)
            keys = safe_loading.restricted_loads(
                raw, self.path, arrays=True, key=KEYS_ENTRY.decode()
            )
            if not isinstance(keys, list) or not all(isinstance(k, bytes) for k in keys):
                raise FormatError(self.path, "keys", "a pickled list of bytes", type(keys).__name__)
            self._index = frozenset(keys)
        return self._index

    def _lmdb_record(self, feature_path: str) -> Tuple[Any, Dict[str, Any], str]:
        """As MMF's ``LMDBFeatureReader``: the number after the last ``_`` of the name as a
        key when the LMDB lists it, else the name itself."""
        name = os.path.normpath(feature_path).split(".npy")[0]
        keys = self._keys()
        try:
            key = str(int(name.split("_")[-1])).encode()
        except ValueError:
            key = None
        if key not in keys:
            key = name.encode()
        if key not in keys:
            raise FormatError(self.path, "key", "an image key listed in its b'keys' entry", name)
        with self._env.begin(write=False, buffers=True) as txn:
            record = safe_loading.restricted_loads(txn.get(key), self.path, arrays=True, key=name)
        if not isinstance(record, dict) or "features" not in record:
            raise FormatError(
                self.path,
                "record",
                "a dict with 'features' (N, D)",
                type(record).__name__,
                key=name,
            )
        info = {k: v for k, v in record.items() if k != "features"}
        return record["features"], info, name

    # ----------------------------------------------------------- npy folder
    def _npy_record(self, feature_path: str) -> Tuple[Any, Dict[str, Any], str]:
        """``<name>.npy`` (a plain array) and ``<name>_info.npy`` (a pickled dict)."""
        name = feature_path.split(".npy")[0]
        try:
            features_file = safe_loading.resolve_inside(self.path, f"{name}.npy")
            info_file = safe_loading.resolve_inside(self.path, f"{name}_info.npy")
        except OutsideFolderError as error:
            raise FormatError(
                self.path,
                "feature_path",
                safe_loading.stays_inside("the features folder", error.reason),
                error.name,
            ) from None
        features = safe_loading.load_npy(features_file)
        if features.dtype.hasobject:
            raise FormatError(
                features_file, "features", "a plain float32 .npy array", "an object array"
            )
        if not info_file.is_file():
            raise FormatError(
                self.path, "info", f"{name}_info.npy beside {name}.npy", "no such file", key=name
            )
        info = safe_loading.load_npy(info_file)
        info = info.item() if info.dtype.hasobject and info.shape == () else info
        if not isinstance(info, dict):
            raise FormatError(info_file, "info", "a dict", type(info).__name__)
        return features, info, name

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self.__dict__, _index=None)  # a spawned worker reads the keys itself
