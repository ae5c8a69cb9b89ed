#!/usr/bin/env python
"""A hash of a toy world's content, independent of how its files were written: the same world
generated with another NumPy or LMDB gives the same hash only if every value is the same.

Every file of the world outside its corpora (``corpus/``, ``corpus_bc/``, ``corpus_k10/``, ...:
built from the world, carried separately) counts: ``.npy`` arrays and the records of each
LMDB (read as the plugin's feature reader reads them, restricted unpickling) by their
dtype, shape and bytes, in key order (an object ``.npy``, MMF's ``_info.npy``, by its objects);
any other file by its bytes. ``--write FILE`` stores
the hash (``tools/bench/gpu_carry.sh`` does, beside a carried corpus); ``--against FILE``
compares with a stored one and fails, naming both, when they differ.

    python tools/bench/world_hash.py WORLD [--write FILE | --against FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any, List, Optional

import numpy as np

CORPUS = "corpus"  # corpus/ and corpus_<name>/: built from the world, carried separately


def _is_corpus(folder: str) -> bool:
    return folder == CORPUS or folder.startswith(f"{CORPUS}_")


def _update(digest: Any, value: Any) -> None:
    """``value`` (arrays, mappings, lists, numbers, text) into ``digest``, by content."""
    if isinstance(value, np.ndarray):
        digest.update(f"array {value.dtype.str} {value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)}".encode())
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _update(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"list {len(value)}".encode())
        for item in value:
            _update(digest, item)
    else:
        digest.update(repr(value).encode())


def _lmdb(digest: Any, folder: Path) -> None:
    import lmdb

    from mmf_uvlp.utils.safe_loading import restricted_loads

    env = lmdb.open(str(folder), subdir=True, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            for key, raw in txn.cursor():
                digest.update(key)
                _update(digest, restricted_loads(raw, str(folder), arrays=True, key=key.decode()))
    finally:
        env.close()


def _npy(path: Path) -> Any:
    """An ``.npy`` file's array; an object array (MMF's ``_info.npy``) by its objects."""
    from mmf_uvlp.utils.safe_loading import load_npy

    array = load_npy(path)
    return array.tolist() if array.dtype == object else array


def world_hash(world: Path) -> str:
    """The world's hash (sha256, hex)."""
    digest = hashlib.sha256()
    for path in sorted(world.rglob("*")):
        relative = path.relative_to(world)
        if _is_corpus(relative.parts[0]) or path.is_dir() and path.suffix != ".lmdb":
            continue
        if path.parent.suffix == ".lmdb":
            continue  # read through its folder
        digest.update(str(relative).encode())
        if path.is_dir():
            _lmdb(digest, path)
        elif path.suffix == ".npy":
            _update(digest, _npy(path))
        else:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("world", type=Path)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="store the hash in this file")
    group.add_argument("--against", type=Path, help="compare with the hash stored in this file")
    args = parser.parse_args(argv)
    if not (args.world / "world.json").is_file():
        parser.error(f"{args.world}: no world.json (not a toy world)")
    found = world_hash(args.world)
    print(f"world {args.world}: {found}")
    if args.write:
        args.write.write_text(found + "\n")
    if args.against:
        stored = args.against.read_text().strip()
        if stored != found:
            print(
                f"world_hash: {args.world} is not the world of {args.against}: {found} here, "
                f"{stored} there (another NumPy draws another world)",
                file=sys.stderr,
            )
            return 1
        print(f"world {args.world}: the same as {args.against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
