"""Loading the files a user is handed without running code from them.

Checkpoints, pickles and ``.npy`` files can carry code that runs on load (pickle calls any
importable function it names). Every such file the plugin reads, and every feature or
annotation file MMF reads for it, goes through this module:

- checkpoints (``.pth`` state dicts, MMF ``.ckpt``): ``torch.load(weights_only=True)``,
  tensors, numpy arrays, numbers, strings and plain containers only
  (:func:`load_checkpoint`); a legacy file holding other objects loads only with an explicit
  ``trust=True``;
- pickles (RefCOCO+ ``refs(unc).p``, MMF feature LMDB values): a restricted unpickler that
  builds plain containers, numbers and strings and, where the format holds them, numpy
  arrays, and refuses every other global (:func:`restricted_loads`, :func:`restricted_load`);
- ``.npy`` files (features, ``_info.npy``, VQA2 imdb): numpy reads the header; an object
  array is unpickled by the same restricted unpickler (:func:`load_npy`);
- names taken from data files (feature keys, image file names) must stay inside their
  folder: no absolute path, no ``..``, no symlink out (:func:`resolve_inside`).

A refusal is an :class:`UnsafeFileError` naming the file and the refused global; a
damaged file is a :class:`~mmf_uvlp.errors.FormatError` naming the file.
"""

from __future__ import annotations

import _compat_pickle
import importlib
import io
import logging
import os
import pickle
import pickletools
import re
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence

import numpy as np

from mmf_uvlp.errors import FormatError, OutsideFolderError, UnsafeFileError

logger = logging.getLogger(__name__)

PLAIN = "plain containers, numbers and strings"
ARRAYS = "plain containers, numbers, strings and numpy arrays"

# Globals a plain-data pickle may name: containers without an opcode of their own, and
# the bytes of protocol-2 pickles (``_codecs.encode(text, "latin1")``).
PLAIN_GLOBALS = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("collections", "OrderedDict"),
        ("_codecs", "encode"),
    }
)
# What ``pickle.dumps`` of numpy arrays, scalars and dtypes names (numpy 1.x and 2.x).
ARRAY_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }
)


class _Refused(pickle.UnpicklingError):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals of plain data (and numpy arrays)."""

    def __init__(self, file: BinaryIO, arrays: bool = False, **kwargs: Any):
        super().__init__(file, **kwargs)
        self.allowed = PLAIN_GLOBALS | ARRAY_GLOBALS if arrays else PLAIN_GLOBALS

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (``__builtin__.set``), mapped as pickle's own find_class does.
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) not in self.allowed:
            raise _Refused(f"{module}.{name}")
        return _resolve(module, name)


def _resolve(module: str, name: str) -> Any:
    """An allowed global; ``numpy.core`` names resolve under numpy 2's ``numpy._core``."""
    if module.startswith("numpy.core.") or module.startswith("numpy._core."):
        tail = module.split(".", 2)[2]
        for prefix in ("numpy._core.", "numpy.core."):
            try:
                return getattr(importlib.import_module(prefix + tail), name)
            except (ImportError, AttributeError):
                continue
    return getattr(importlib.import_module(module), name)


def restricted_load(
    file: BinaryIO,
    path: str | os.PathLike,
    arrays: bool = False,
    key: Optional[str] = None,
    **kwargs: Any,
) -> Any:
    """Unpickle ``file`` (read from ``path``) with :class:`RestrictedUnpickler`."""
    allowed = ARRAYS if arrays else PLAIN
    try:
        return RestrictedUnpickler(file, arrays=arrays, **kwargs).load()
    except _Refused as refused:
        raise UnsafeFileError(path, refused.name, allowed, key=key) from None
    except Exception as error:  # a damaged pickle fails with any: LookupError, OverflowError, ...
        raise FormatError(
            path,
            "pickle",
            f"a complete pickle of {allowed}",
            f"{type(error).__name__}: {error}",
            key=key,
        ) from None


def restricted_loads(
    data: bytes | memoryview,
    path: str | os.PathLike,
    arrays: bool = False,
    key: Optional[str] = None,
) -> Any:
    """:func:`restricted_load` of bytes (e.g. an LMDB value of ``path``)."""
    if data is None:
        raise FormatError(path, "value", "a pickled value", None, key=key)
    return restricted_load(io.BytesIO(data), path, arrays, key)


def load_npy(file: str | os.PathLike | BinaryIO, mmap_mode: Optional[str] = None) -> np.ndarray:
    """An ``.npy`` array from a path or an open binary file (MMF main's ``load_feat`` passes
    one); an object array (a pickle inside the file) is unpickled with the restricted
    unpickler (plain data and numpy arrays only)."""
    if hasattr(file, "read"):
        path = str(getattr(file, "name", "<stream>"))
        start = file.tell()
        try:
            return _read_npy(file, path, mmap_mode=None, reread=lambda: (file.seek(start), file)[1])
        except Exception as error:  # a damaged header fails with any: TokenError, ...
            raise _npy_error(path, error) from None
    path = os.fspath(file)
    try:
        with open(path, "rb") as handle:
            return _read_npy(handle, path, mmap_mode, reread=lambda: path)
    except Exception as error:
        raise _npy_error(path, error) from None


def _read_npy(
    handle: BinaryIO, path: str, mmap_mode: Optional[str], reread: Callable[[], Any]
) -> np.ndarray:
    """The array of an open ``.npy`` file: an object array through the restricted unpickler,
    any other read again by ``np.load`` from ``reread()`` without pickles."""
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        _, _, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        _, _, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        dtype = None
    if dtype is not None and dtype.hasobject:
        array = restricted_load(handle, path, arrays=True, encoding="ASCII")
        if not isinstance(array, np.ndarray):
            raise FormatError(path, "array", "a numpy array", type(array).__name__)
        return array
    return np.load(reread(), mmap_mode=mmap_mode, allow_pickle=False)


def _npy_error(path: str, error: BaseException) -> BaseException:
    """``error`` of reading ``path`` as the one to raise: a FormatError naming the file."""
    if isinstance(error, (FormatError, FileNotFoundError)):
        return error
    return FormatError(
        path, "npy", "a complete .npy file (numpy.save)", f"{type(error).__name__}: {error}"
    )


_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def numpy_data() -> List[Any]:
    """What numpy arrays, scalars and dtypes need to be loaded as data (a numpy RNG state,
    ``np.random.get_state()``, is one), under the names numpy 1.x and 2.x pickle them by.
    Their elements are built by the same restricted unpickler."""
    import numpy.dtypes

    # numpy 2.x keeps the module as numpy._core (numpy.core warns); 1.x only as numpy.core
    numpy_1 = np.lib.NumpyVersion(np.__version__) < "2.0.0"
    multiarray = np.core.multiarray if numpy_1 else np._core.multiarray
    found: List[Any] = [np.ndarray, np.dtype]
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        found += [
            (multiarray._reconstruct, f"{module}._reconstruct"),
            (multiarray.scalar, f"{module}.scalar"),
        ]
    return found + [
        getattr(numpy.dtypes, name) for name in dir(numpy.dtypes) if name.endswith("DType")
    ]


def load_checkpoint(
    path: str | os.PathLike,
    trust: bool = False,
    trust_hint: str = "",
    map_location: Any = "cpu",
    allowed: Sequence[Any] = (),
) -> Any:
    """``torch.load`` of a user's checkpoint: tensors, numpy arrays, numbers, strings and plain
    containers only (``allowed``: further classes to accept), unless ``trust`` (a legacy file
    the user vouches for: it may run code).

    ``trust_hint`` tells, in a refusal, how the user opts in (e.g. ``pass --trust-checkpoint``).
    Raises FileNotFoundError, :class:`UnsafeFileError` naming every refused class or function,
    or :class:`FormatError` for a damaged file.
    """
    import torch

    path = os.fspath(path)
    if trust:
        logger.warning(
            "%s: loaded as a trusted checkpoint (any object it holds is built, which can run code)",
            path,
        )
    with torch.serialization.safe_globals(numpy_data() + list(allowed)), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(path, map_location=map_location, weights_only=not trust)
        except FileNotFoundError:
            raise
        except Exception as error:  # a damaged pickle fails with any: KeyError, TypeError, ...
            refused = [name for name in refused_globals(path) if not _numpy_data_name(name)]
            found = _REFUSED_GLOBAL.search(str(error))
            if not refused and found and "Weights only load failed" in str(error):
                refused = [found.group(1)]
            if refused:
                raise UnsafeFileError(
                    path,
                    ", ".join(refused),
                    "tensors, numbers, strings and plain containers",
                    trust_hint=trust_hint,
                ) from None
            raise _damaged_checkpoint(path, error) from None


def _damaged_checkpoint(path: str, error: BaseException) -> FormatError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return FormatError(
        path,
        "checkpoint",
        "a complete file written by torch.save (damaged or truncated?)",
        f"{type(error).__name__}: {first}",
    )


def _numpy_data_name(name: str) -> bool:
    return (
        name in {"numpy.ndarray", "numpy.dtype"}
        or name.startswith("numpy.dtypes.")
        or name.rsplit(".", 1)[-1] in ("_reconstruct", "scalar")
        and ".multiarray." in name
    )


def refused_globals(path: str) -> List[str]:
    """The classes and functions a pickle in ``path`` names that plain-data loading refuses
    (read statically, nothing is executed); empty when none, or when the file is unreadable."""
    import torch

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


def unsafe_name(name: str) -> Optional[str]:
    """Why ``name`` (a relative path from a data file) could leave its folder, or None."""
    if not name:
        return "is empty"
    if "\x00" in name:
        return "holds a NUL character"
    if os.path.isabs(name) or PurePosixPath(name).is_absolute() or re.match(r"^[A-Za-z]:", name):
        return "is an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "has a '..' component"
    return None


def stays_inside(where: str, reason: str) -> str:
    """What a refused name was expected to be: a name inside ``where``; ``reason``: why this
    one is not (from :func:`unsafe_name` or :class:`OutsideFolderError`)."""
    return f"a relative name that stays inside {where} (this one {reason})"


def resolve_inside(folder: str | os.PathLike, name: str) -> Path:
    """``folder / name`` with symlinks resolved; :class:`OutsideFolderError` unless it stays
    inside ``folder`` (itself resolved)."""
    reason = unsafe_name(name)
    if reason is not None:
        raise OutsideFolderError(folder, name, reason)
    root = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(os.path.join(root, name)))
    if target != root and root not in target.parents:
        raise OutsideFolderError(folder, name, f"is a symlink to {target}")
    return target
