"""Region features resident on the training device, for worlds that fit (an opt-in).

With ``dataset_config.<name>.resident_features: True`` a pre-training dataset reads the
real rows of every image it lists once, when it is built, into its own
:class:`ResidentFeatures` table (one row per region). Its samples then carry no feature values:
the masking processors get zero-width features and ``feature_rows``, the table row of each
region, and a batch holds ``region_feature_rows`` (B, R') (-1 at padding) instead of
(B, R', D) floats. The dataset's ``prepare_batch`` makes the features on the batch's
device from its table (:meth:`ResidentFeatures.fill`, the table moved there once): the originals gathered by row, the masked view with the zeroed regions
(``region_zeroed``) at zero, the same values as a batch read from the files. DataLoader
workers then copy, pin and move indices only.

The table lives in the training process, owned by its dataset; workers, forked or spawned, carry only each
image's row range. On a CUDA device it may take at most :data:`DEVICE_SHARE` of the free
memory (the rest is left to training); a larger one is refused naming the key. The
fine-tuning datasets keep MMF's readers (fixed ``max_features`` rows, no table).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, List, Tuple

import torch

from mmf_uvlp.batch import COPIES_FIELD, ORIGINAL_FEATURE_FIELDS, ROWS_FIELD
from mmf_uvlp.errors import UserConfigError

logger = logging.getLogger(__name__)

KEY = "resident_features"
DEVICE_SHARE = 0.5
ImageRows = Tuple[int, int, Dict[str, Any]]  # first table row, row count, info fields


class ResidentFeatures:
    """A dataset's table of resident feature rows and where each image's rows start."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """An empty table (a new run in the same process)."""
        self._chunks: List[torch.Tensor] = []
        self._rows = 0
        self._dim: int | None = None
        self._images: Dict[Tuple[str, Any, str], ImageRows] = {}
        self._tables: Dict[torch.device, torch.Tensor] = {}

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def nbytes(self) -> int:
        return self._rows * (self._dim or 0) * 4

    def load(
        self, database: Any, feature_paths: Iterable[str], dataset: str
    ) -> Dict[str, ImageRows]:
        """Each image of ``feature_paths`` (its real rows, ``database.from_path``, with every
        check of the reader) in the table, once per (location, ``max_features``, path);
        returns each path's (first row, row count, info)."""
        entries: Dict[str, ImageRows] = {}
        for feature_path in feature_paths:
            key = (database.path, getattr(database, "max_features", None), feature_path)
            if key not in self._images:
                record = database.from_path(feature_path)
                rows = record["image_feature_0"]
                if self._dim is None:
                    self._dim = int(rows.shape[1])
                elif rows.shape[1] != self._dim:
                    raise ValueError(
                        f"dataset_config.{dataset}.{KEY}: {database.path} image "
                        f"{feature_path} has {rows.shape[1]}-d features, the table "
                        f"{self._dim}-d ones (every resident dataset needs one feature size)"
                    )
                self._images[key] = (self._rows, int(rows.shape[0]), record["image_info_0"])
                self._chunks.append(rows)
                self._rows += int(rows.shape[0])
                self._tables.clear()
            entries[feature_path] = self._images[key]
        logger.info(
            "resident features: %s, %d images; table %d rows, %.1f MiB",
            dataset,
            len(entries),
            self._rows,
            self.nbytes / 2**20,
        )
        return entries

    def table(self, device: Any) -> torch.Tensor:
        """The (rows, D) float32 table on ``device``, moved there on the first call."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._tables:
            if not self._chunks:
                raise RuntimeError(
                    f"resident features: a batch has {ROWS_FIELD} but no "
                    f"dataset loaded its images (dataset_config.<name>.{KEY})"
                )
            if device.type == "cuda":
                check_fits(self.nbytes, torch.cuda.mem_get_info(device)[0])
            host = torch.cat(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
            self._chunks = [host]
            self._tables[device] = host.to(device)
        return self._tables[device]

    def fill(self, sample_list: Any) -> None:
        """The features of a batch with ``region_feature_rows``, made on its device from
        this table (see the module docstring): ``region_features`` (masked) and the
        originals, each field of ``region_copies`` (a collated batch) or else each original
        feature field present (a batch of fixed-size samples); any other batch is left as
        it is."""
        rows = sample_list.get(ROWS_FIELD) if hasattr(sample_list, "get") else None
        if rows is None:
            return
        table = self.table(rows.device)
        real = rows >= 0
        original = table[rows.clamp(min=0)] * real.unsqueeze(-1).to(table.dtype)
        zeroed = sample_list["region_zeroed"].to(torch.bool).unsqueeze(-1)
        sample_list["region_features"] = original.masked_fill(zeroed, 0.0)
        copies = sample_list.get(COPIES_FIELD) or [
            key for key in ORIGINAL_FEATURE_FIELDS if sample_list.get(key) is not None
        ]
        for key in copies:
            sample_list[key] = original


def check_fits(nbytes: int, free: int) -> None:
    """Refuse a table of ``nbytes`` over :data:`DEVICE_SHARE` of ``free`` device bytes."""
    if nbytes > DEVICE_SHARE * free:
        raise MemoryError(
            f"dataset_config.<name>.{KEY}: the feature table takes {nbytes / 2**30:.2f} GiB, "
            f"more than {DEVICE_SHARE:.0%} of the device's {free / 2**30:.2f} GiB free; set "
            f"{KEY}=False for these datasets (their features are then read by the workers)"
        )


def option(config: Any, dataset: str) -> bool:
    """``dataset_config.<dataset>.resident_features``, which must be a boolean."""
    value = config.get(KEY, False)
    if not isinstance(value, bool):
        raise UserConfigError(
            f"dataset_config.{dataset}.{KEY}: expected True or False, got {value!r}"
        )
    return value
