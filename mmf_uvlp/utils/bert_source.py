"""Where the BERT weights and tokenizer come from: ``${uvlp_bert:<default>}`` in configs.

The resolver picks, in this order: the config key ``env.bert`` (a local folder or a
Hugging Face hub name), ``$UVLP_BERT`` (a local folder), else ``<default>``
(``bert-base-uncased``). The name is then loaded the standard Hugging Face way by
``from_pretrained``: from the hub cache, downloaded when online, never downloaded when
``HF_HUB_OFFLINE=1``. A model that cannot be loaded ends in one line saying what to set
(:func:`missing_bert_message`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional

from mmf_uvlp.utils.user_config import UserConfigError

VARIABLE = "UVLP_BERT"
CONFIG_KEY = "env.bert"
HOW_TO_SET = (
    f"set {CONFIG_KEY}=<local BERT folder or hub name> (or ${VARIABLE}=<local folder>); "
    "online, `huggingface-cli download bert-base-uncased` fills the cache once"
)


def _is_bert_folder(path: str) -> bool:
    return (Path(path) / "config.json").is_file()


def bert_source(default: str = "bert-base-uncased", *, _root_: Optional[Any] = None) -> str:
    """The BERT folder or hub name to load (see the module docstring)."""
    from omegaconf import OmegaConf

    configured = None
    if _root_ is not None:
        configured = OmegaConf.select(_root_, CONFIG_KEY, default=None, throw_on_missing=False)
    if configured:
        return str(configured)
    value = os.environ.get(VARIABLE, "").strip()
    if value:
        if not _is_bert_folder(value):
            raise UserConfigError(
                f"${VARIABLE}={value!r} is not a BERT folder (no config.json in it); "
                f"unset it to load {default!r} from Hugging Face, or {HOW_TO_SET}"
            )
        return value
    return default


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
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    where = ("not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE=1 forbids "
             "downloading it" if offline else
             "not a local folder, not in the Hugging Face cache, and its download failed")
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
                elif name == "tokenizer_config" and isinstance(value, dict) \
                        and isinstance(value.get("type"), str):
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


def load_or_explain(load: Any, name: str, key: str) -> Any:
    """``load(name)``; when it fails because the model cannot be found, a
    :class:`UserConfigError` naming ``key`` and what to set."""
    try:
        return load(name)
    except (OSError, ValueError, ImportError) as error:
        message = missing_bert_message(name)
        if message is None:
            raise
        raise UserConfigError(f"{key}={name!r}: {message}") from error


def register_resolver() -> None:
    """Make ``${uvlp_bert:<default>}`` available to OmegaConf (MMF's configs)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("uvlp_bert"):
        OmegaConf.register_new_resolver("uvlp_bert", bert_source)
