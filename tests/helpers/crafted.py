"""Pickled inputs written by hand: a payload whose unpickling runs code, and MMF's feature
LMDB of pickled values, plain or carrying the payload (the safe loaders must refuse it
without running it)."""

import pickle
from pathlib import Path
from typing import Any, Dict, Union

import lmdb


class CreatesFile:
    """Pickles into ``open(path, "w")``: unpickling it creates ``path``."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return open, (self.path, "w")


def write_lmdb(path: Path, values: Dict[str, Any]) -> str:
    """An LMDB at ``path`` as MMF's feature files are written: each value pickled under its
    key, and the list of keys under ``keys``; returns ``path`` as a string."""
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for key, value in values.items():
            txn.put(key.encode(), pickle.dumps(value))
        txn.put(b"keys", pickle.dumps([k.encode() for k in values]))
    env.close()
    return str(path)
