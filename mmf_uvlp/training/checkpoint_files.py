"""Checkpoint files of a run: written atomically, read as plain data, each failure named.

- :func:`atomic_torch_save` writes to a temporary file beside the target and renames it, so a
  crash never leaves a partial checkpoint; a failed write (``ENOSPC``: the disk is full) is a
  :class:`CheckpointWriteError` naming the error code and the file.
- :func:`load_checkpoint` reads with ``torch.load(weights_only=True)``: tensors, numpy arrays
  (a numpy RNG state), numbers, strings and containers, plus the classes a caller allows
  explicitly. A checkpoint is a file users hand each other, and unpickling anything else can
  run code: such a file is refused (:class:`RefusedCheckpoint`, naming the objects and, where
  one exists, the opt-in for a trusted legacy file); one that cannot be read at all is a
  :class:`DamagedCheckpoint`.
"""

from __future__ import annotations

import logging
import os
import pickletools
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from mmf_uvlp.errors import CheckpointWriteError, DamagedCheckpoint, RefusedCheckpoint
from mmf_uvlp.utils.atomic import atomic_open
from mmf_uvlp.utils.safe_loading import numpy_data


class WriteErrors:
    """A file object for ``torch.save`` that keeps the first OSError of its writes: torch's
    zip writer turns it into its own RuntimeError ("unexpected pos ..."), naming no cause."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.error: Optional[OSError] = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.handle.flush()


def atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename: never a partial file.

    The file is written through Python's file object, so a failed write surfaces as the
    operating system's error (torch's own writer reports only "iostream error" or
    "unexpected pos"), wherever it is raised.
    """
    try:
        # the temporary file is removed before the error is built: the free space it tells
        # is what a retry would have
        with atomic_open(path, "wb", temporary=f"{path}.tmp-{os.getpid()}", fsync=True) as handle:
            writes = WriteErrors(handle)
            try:
                torch.save(obj, writes)
            except RuntimeError as error:
                if writes.error is None:
                    raise
                raise writes.error from error
    except OSError as error:
        raise CheckpointWriteError(str(path), error) from error


def _numpy_data_name(name: str) -> bool:
    return (
        name in {"numpy.ndarray", "numpy.dtype"}
        or name.startswith("numpy.dtypes.")
        or name.rsplit(".", 1)[-1] in ("_reconstruct", "scalar")
        and ".multiarray." in name
    )


def load_checkpoint(
    path: str,
    map_location: Any = "cpu",
    allowed: Sequence[Callable] = (),
    trust: bool = False,
    trust_hint: str = "",
) -> Dict[str, Any]:
    """The checkpoint at ``path``, loaded as plain data and numpy arrays (``allowed``: further
    classes to accept); ``trust``: a legacy file the user vouches for, loaded whatever it
    holds (it may run code); ``trust_hint``: how the user opts in, told in a refusal.

    Raises FileNotFoundError, :class:`RefusedCheckpoint` or :class:`DamagedCheckpoint`.
    """
    if trust:
        logging.getLogger(__name__).warning(
            "%s: loaded as a trusted checkpoint (any object it holds is built, which can run code)",
            path,
        )
    with torch.serialization.safe_globals(numpy_data() + list(allowed)), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(path, map_location=map_location, weights_only=not trust)
        except FileNotFoundError:
            raise
        except Exception as exc:
            refused = [name for name in refused_globals(str(path)) if not _numpy_data_name(name)]
            if refused:
                raise RefusedCheckpoint(str(path), refused, trust_hint) from exc
            first = next((line for line in str(exc).splitlines() if line.strip()), "").split(". ")[
                0
            ]
            raise DamagedCheckpoint(str(path), f"{type(exc).__name__}: {first}") from exc


def refused_globals(path: str) -> List[str]:
    """The classes and functions a pickle in ``path`` names that plain-data loading refuses
    (read statically, nothing is executed); empty when none, or when the file is unreadable."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except ValueError:  # not a zip file written by torch.save: a pickle stream
        pass
    except Exception:
        return []
    torch_own = ("torch.", "collections.OrderedDict")
    return sorted(name for name in set(_pickle_globals(path)) if not name.startswith(torch_own))


_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET = {"GET", "BINGET", "LONG_BINGET"}


def _pickle_globals(path: str) -> List[str]:
    """Every ``module.name`` the pickles at the start of ``path`` import (GLOBAL, INST,
    STACK_GLOBAL), found by disassembling them with :mod:`pickletools`."""
    found: List[str] = []
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        while handle.tell() < size:
            pushed: List[Optional[str]] = []  # what each push put on the stack, strings kept
            memo: Dict[int, Optional[str]] = {}
            try:
                for opcode, arg, _ in pickletools.genops(handle):
                    name = opcode.name
                    if name in ("GLOBAL", "INST"):
                        found.append(str(arg).replace(" ", "."))
                    if name == "STACK_GLOBAL" and len(pushed) >= 2 and None not in pushed[-2:]:
                        found.append(f"{pushed[-2]}.{pushed[-1]}")
                    if name == "MEMOIZE":
                        memo[len(memo)] = pushed[-1] if pushed else None
                    elif name in _PUT:
                        memo[int(arg)] = pushed[-1] if pushed else None
                    elif name in _GET:
                        pushed.append(memo.get(int(arg)))
                    elif isinstance(arg, str) and opcode.stack_after:
                        pushed.append(arg)
                    elif opcode.stack_after:
                        pushed.append(None)
            except Exception:  # not (or no longer) a pickle: raw tensor bytes, damage
                break
    return found


def omegaconf_containers() -> List[Any]:
    """What omegaconf's DictConfig and ListConfig need to be loaded as data (MMF main keeps
    config values such as the optimizer's ``betas`` in its checkpoints as ListConfig)."""
    import collections
    import typing

    from omegaconf import DictConfig, ListConfig, nodes
    from omegaconf.base import ContainerMetadata, Metadata

    return [
        DictConfig,
        ListConfig,
        ContainerMetadata,
        Metadata,
        nodes.AnyNode,
        nodes.StringNode,
        nodes.IntegerNode,
        nodes.FloatNode,
        nodes.BooleanNode,
        (typing.Any, "typing.Any"),
        collections.defaultdict,
        dict,
        list,
        int,
        float,
        str,
        bool,
    ]
