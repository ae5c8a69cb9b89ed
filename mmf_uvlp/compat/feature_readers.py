"""MMF's feature readers and annotation database (1.0.0rc10 and main): one LMDB environment
per file and process, and files that are read as data only (restricted ``numpy`` and
``pickle``), stay inside their folder, hold finite values and fail naming their file."""

from __future__ import annotations

import os
import types
from typing import Any, Optional


class _SharedLmdb(types.ModuleType):
    """The ``lmdb`` module as seen by MMF's feature readers: one environment per file and
    process, each DataLoader worker reading through its own."""

    def open(self, path: str, **kwargs: Any) -> Any:  # noqa: A003  (mirrors lmdb.open)
        from mmf_uvlp.utils import lmdb_envs

        return lmdb_envs.ProcessLocalEnvironment(path, **kwargs)

    def __getattr__(self, item: str) -> Any:
        import lmdb

        return getattr(lmdb, item)


def shared_lmdb_environments() -> None:
    """MMF's readers open LMDB files through :class:`_SharedLmdb`."""
    import mmf.datasets.databases.readers.feature_readers as feature_readers

    feature_readers.lmdb = _SharedLmdb("lmdb")


def _real_rows(info: Any, feature: Any) -> int:
    """The real rows of a padded feature reader's output (its ``max_features``)."""
    count = info.get("max_features") if isinstance(info, dict) else None
    return feature.shape[0] if count is None else min(int(count), feature.shape[0])


class _RestrictedNumpy(types.ModuleType):
    """``numpy`` as seen by MMF's feature readers and annotation database: an object array
    in an ``.npy`` file is unpickled with the plugin's restricted unpickler."""

    def load(self, file: str, mmap_mode: Optional[str] = None, *args: Any, **kwargs: Any) -> Any:
        from mmf_uvlp.utils.safe_loading import load_npy

        return load_npy(file, mmap_mode)

    def __getattr__(self, item: str) -> Any:
        import numpy

        return getattr(numpy, item)


class _RestrictedPickle(types.ModuleType):
    """``pickle`` as seen by MMF's LMDB feature reader: plain data and numpy arrays only."""

    def loads(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        from mmf_uvlp.utils.safe_loading import restricted_loads

        return restricted_loads(data, "an LMDB value", arrays=True)

    def __getattr__(self, item: str) -> Any:
        import pickle

        return getattr(pickle, item)


def read_as_data_only() -> None:
    """MMF's readers unpickle through the restricted modules and check what they read."""
    import mmf.datasets.databases.annotation_database as annotation_database
    import mmf.datasets.databases.readers.feature_readers as feature_readers
    import torch

    from mmf_uvlp.data_formats.mmf_features import non_finite
    from mmf_uvlp.errors import FormatError, OutsideFolderError, UnsafeFileError
    from mmf_uvlp.utils.safe_loading import resolve_inside, stays_inside

    feature_readers.np = _RestrictedNumpy("numpy")
    feature_readers.pickle = _RestrictedPickle("pickle")
    annotation_database.np = _RestrictedNumpy("numpy")
    FeatureReader = feature_readers.FeatureReader
    LMDBFeatureReader = feature_readers.LMDBFeatureReader
    read, load_lmdb = FeatureReader.read, LMDBFeatureReader._load

    def _read(self: Any, image_feat_path: str) -> Any:
        if image_feat_path.endswith("npy") and not self.base_path.endswith(".lmdb"):
            name = image_feat_path.split(".npy")[0]
            try:
                resolve_inside(self.base_path, image_feat_path)
                if os.path.lexists(os.path.join(self.base_path, f"{name}_info.npy")):
                    resolve_inside(self.base_path, f"{name}_info.npy")
            except OutsideFolderError as error:
                raise FormatError(
                    self.base_path,
                    "feature_path",
                    stays_inside("the features folder", error.reason),
                    error.name,
                ) from None
        result = read(self, image_feat_path)
        feature = result[0] if isinstance(result, tuple) else None
        if torch.is_tensor(feature) and feature.is_floating_point():
            feature = feature[: _real_rows(result[1], feature)]  # not the reader's padding
            finite = torch.isfinite(feature)
            if not bool(finite.all()):
                raise FormatError(
                    self.base_path,
                    "features",
                    "finite values",
                    non_finite(feature.numpy(), finite.numpy()),
                    key=image_feat_path,
                )
        return result

    def _load_lmdb(self: Any, image_file_path: str) -> Any:
        name = os.path.relpath(image_file_path, self.db_path).split(".npy")[0]
        try:
            return load_lmdb(self, image_file_path)
        except UnsafeFileError as error:
            raise UnsafeFileError(self.db_path, error.refused, error.allowed, key=name) from None
        except FormatError as error:
            raise FormatError(
                self.db_path, error.field, error.expected, error.got, key=name
            ) from None
        except KeyError:
            raise FormatError(
                self.db_path, "key", "an image key listed in its b'keys' entry", name
            ) from None

    FeatureReader.read = _read
    LMDBFeatureReader._load = _load_lmdb
