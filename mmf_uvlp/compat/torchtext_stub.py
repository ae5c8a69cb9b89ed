"""A stand-in ``torchtext`` for MMF 1.0.0rc10's vocabularies where torchtext's binary does not
load (torch 2.x): importing it works, using it says what to use instead."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class Unavailable(types.ModuleType):
    """A module whose every attribute access explains that it is unavailable."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise ImportError(
            f"{self.__name__}.{item} is unavailable: torchtext's binary does not load on "
            "torch 2.x. Use a vocabulary file (vocab type 'random'/'intersected' "
            "without torchtext embeddings) or the bert_tokenizer processor."
        )


def install() -> None:
    """The real torchtext where it loads, else the stand-in."""
    try:
        importlib.import_module("torchtext.vocab")
        return
    except Exception:
        for name in [m for m in sys.modules if m == "torchtext" or m.startswith("torchtext.")]:
            del sys.modules[name]
    package = Unavailable("torchtext")
    vocab = Unavailable("torchtext.vocab")
    vocab.pretrained_aliases = {}
    package.vocab = vocab
    sys.modules["torchtext"] = package
    sys.modules["torchtext.vocab"] = vocab
