"""Writers of the world's files, byte-deterministic for a given content.

The formats are documented with their readers in :mod:`mmf_uvlp.data_formats`.
"""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import lmdb
import numpy as np

from mmf_uvlp.data_formats.mmf_features import KEYS_ENTRY
from mmf_uvlp.toy_world.detector import Detections
from mmf_uvlp.toy_world.vocabulary import CLASSES

PICKLE_PROTOCOL = 4
LMDB_MAP_SIZE = 1 << 36
LMDB_COMMIT_EVERY = 256


def dumps(record) -> str:
    """Compact, key-order-preserving json for one line."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def write_lines(path: Path, lines) -> int:
    """Write one string per line (UTF-8, ``\\n``); returns the number of lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            if "\n" in line or "\r" in line:
                raise ValueError(f"line for {path} contains a newline: {line!r}")
            f.write(line + "\n")
            count += 1
    return count


def write_json(path: Path, obj, indent: int | None = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def write_pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=PICKLE_PROTOCOL)


def write_object_npy(path: Path, records: list) -> None:
    """``np.save`` of an object array of dicts (MMF's imdb format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.empty(len(records), dtype=object)
    array[:] = records
    np.save(path, array, allow_pickle=True)


def mmf_record(det: Detections) -> dict:
    """The per-image dict of MMF's feature files (``features`` included)."""
    n = len(det)
    return {
        "image_id": det.image_id,
        "image_width": det.width,
        "image_height": det.height,
        "num_boxes": n,
        "objects": np.asarray(det.labels, dtype=np.int64).reshape(n),
        "cls_prob": det.cls_prob,
        "bbox": np.asarray(det.boxes, dtype=np.float32).reshape(n, 4),
        "features": det.features,
    }


def prediction_json(det: Detections) -> dict:
    return {
        "image_h": det.height,
        "image_w": det.width,
        "num_boxes": len(det),
        "objects": [
            {
                "rect": box,
                "class": CLASSES[label].name,
                "conf": conf,
                "attributes": attrs,
                "attr_scores": scores,
            }
            for box, label, conf, attrs, scores in zip(
                det.boxes, det.labels, det.confs, det.attributes, det.attr_scores
            )
        ],
    }


class PoolWriter:
    """Writes one image pool in every requested format, one image at a time.

    Images must come in increasing image-id order (the LMDB is written in key order
    into a fresh environment, which makes its bytes reproducible).
    """

    def __init__(self, out: Path, pool: str, features: bool, vinvl_features: bool, npy: bool):
        self.out, self.pool = out, pool
        self.paths: dict[str, str] = {}
        det_dir = out / "detections" / pool
        det_dir.mkdir(parents=True, exist_ok=True)
        self._files = {
            "images_gt": self._open(out / "images_gt" / f"{pool}.jsonl", "images_gt"),
            "predictions_tsv": self._open(det_dir / "predictions.tsv", "predictions_tsv"),
            "detections_jsonl": self._open(det_dir / "detections.jsonl", "detections_jsonl"),
        }
        if features and vinvl_features:
            self._files["features_tsv"] = self._open(det_dir / "features.tsv", "features_tsv")
        self._env = None
        if features:
            lmdb_path = out / "features" / f"{pool}.lmdb"
            if lmdb_path.exists():
                raise FileExistsError(f"{lmdb_path} exists; write the world into a fresh OUT")
            lmdb_path.mkdir(parents=True)
            self._env = lmdb.open(
                str(lmdb_path),
                map_size=LMDB_MAP_SIZE,
                subdir=True,
                lock=False,
                meminit=True,
                sync=False,
            )
            self._txn = self._env.begin(write=True)
            self.paths["lmdb"] = self._rel(lmdb_path)
        self._npy_dir = None
        if features and npy:
            self._npy_dir = out / "features" / pool
            self._npy_dir.mkdir(parents=True, exist_ok=True)
            self.paths["npy_dir"] = self._rel(self._npy_dir)
        self._keys: list[bytes] = []
        self.num_images = 0
        self.num_regions = 0

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    def _open(self, path: Path, name: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.paths[name] = self._rel(path)
        return open(path, "w", encoding="utf-8", newline="\n")

    def write(self, scene_json: dict, det: Detections) -> None:
        key = det.image_id.encode("utf-8")
        if self._keys and key <= self._keys[-1]:
            raise ValueError(
                f"pool {self.pool}: image ids must increase, got "
                f"{det.image_id!r} after {self._keys[-1].decode()!r}"
            )
        self._keys.append(key)
        self.num_images += 1
        self.num_regions += len(det)
        gt = dict(
            scene_json, regions=[{"source": s, "kind": k} for s, k in zip(det.sources, det.kinds)]
        )
        self._files["images_gt"].write(dumps(gt) + "\n")
        self._files["predictions_tsv"].write(f"{det.image_id}\t{dumps(prediction_json(det))}\n")
        simple = {
            "image_id": det.image_id,
            "image_h": det.height,
            "image_w": det.width,
            "objects": [
                {"rect": b, "class": CLASSES[c].name, "conf": p}
                for b, c, p in zip(det.boxes, det.labels, det.confs)
            ],
        }
        self._files["detections_jsonl"].write(dumps(simple) + "\n")
        if det.features is None:
            return
        if "features_tsv" in self._files:
            full = np.concatenate([det.features, det.geometry()], axis=1).astype("<f4")
            blob = base64.b64encode(full.tobytes()).decode("ascii")
            self._files["features_tsv"].write(f"{det.image_id}\t{len(det)}\t{blob}\n")
        record = mmf_record(det)
        self._txn.put(key, pickle.dumps(record, protocol=PICKLE_PROTOCOL), append=True)
        if self.num_images % LMDB_COMMIT_EVERY == 0:
            self._txn.commit()
            self._txn = self._env.begin(write=True)
        if self._npy_dir is not None:
            np.save(self._npy_dir / f"{det.image_id}.npy", det.features, allow_pickle=False)
            info = {
                k: record[k]
                for k in ("bbox", "num_boxes", "image_width", "image_height", "objects", "cls_prob")
            }
            np.save(self._npy_dir / f"{det.image_id}_info.npy", info, allow_pickle=True)

    def close(self) -> dict[str, str]:
        """Finish every file; returns the written paths relative to OUT."""
        for f in self._files.values():
            f.close()
        if self._env is not None:
            self._txn.put(KEYS_ENTRY, pickle.dumps(self._keys, protocol=PICKLE_PROTOCOL))
            self._txn.commit()
            self._env.sync(True)
            self._env.close()
        return dict(self.paths)
