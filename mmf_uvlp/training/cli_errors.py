"""A user's config mistake, a refused data file or a run stopped by its data or its disk
ends ``mmf_run`` with one line, ``mmf_run: error: ...``, and status 2 (config or data file)
or 1 (run), instead of a stack trace."""

from __future__ import annotations

from typing import Optional, Tuple


def user_error_of(exc: BaseException) -> Optional[Tuple[str, int]]:
    """The one-line message of a user's config mistake or of a refused or damaged data file
    (exit status 2), or of a run stopped for a reason the user can act on (status 1),
    inside ``exc``, if it is one."""
    from omegaconf.errors import OmegaConfBaseException

    from mmf.common.registry import registry

    from mmf_uvlp.errors import FormatError, LmdbOpenError, RunStopped, UserConfigError
    from mmf_uvlp.trainers.choice import chosen_by

    key, seen = None, exc
    while seen is not None:
        if isinstance(seen, OmegaConfBaseException) and getattr(seen, "full_key", None):
            key = seen.full_key
        if isinstance(seen, UserConfigError):
            return (f"{seen} (config key {key})" if key else str(seen)), 2
        if isinstance(seen, (FormatError, LmdbOpenError)):
            return str(seen), 2
        if isinstance(seen, RunStopped):
            return str(seen), 1
        seen = seen.__cause__ or seen.__context__
    if not chosen_by(registry.get("config", None, no_warning=True)):
        return None  # MMF's own runs keep MMF's stack traces for MMF's errors
    missing = missing_data_file_of_config(exc)
    if missing is not None:
        return missing, 2
    unwritable = unwritable_folder_of_config(exc)
    if unwritable is not None:
        return unwritable, 2
    if isinstance(exc, (OSError, ImportError)):
        message = missing_bert_of_config()
        return (message, 2) if message else None
    return None


def missing_data_file_of_config(exc: BaseException) -> Optional[str]:
    """The one line for a dataset file of the run's config that does not exist."""
    from mmf.common.registry import registry

    from mmf_uvlp.utils.user_config import missing_data_file_message

    config = registry.get("config", no_warning=True)
    return None if config is None else missing_data_file_message(config, exc)


def unwritable_folder_of_config(exc: BaseException) -> Optional[str]:
    """The one line for a folder of the run's config (save, TensorBoard) it cannot write."""
    from mmf.common.registry import registry

    from mmf_uvlp.utils.user_config import unwritable_folder_message

    config = registry.get("config", no_warning=True)
    return None if config is None else unwritable_folder_message(config, exc)


def missing_bert_of_config() -> Optional[str]:
    """The one line for a BERT of the run's config that is neither local nor cached."""
    from mmf.common.registry import registry

    from mmf_uvlp.utils.bert_source import (
        HOW_TO_SET,
        configured_bert_names,
        missing_bert_message,
    )

    config = registry.get("config", no_warning=True)
    if config is None:
        return None
    written = configured_bert_names(config, resolve=False)
    for key, name in configured_bert_names(config).items():
        # a name written literally (MMF's own configs: bert-base-uncased) ignores env.bert
        how = (
            HOW_TO_SET
            if "uvlp_bert" in written.get(key, "")
            else f"set {key}=<local BERT folder or hub name>; online, `huggingface-cli download "
            f"{name}` fills the cache once"
        )
        message = missing_bert_message(name, how)
        if message is not None:
            return f"{key}={name!r}: {message}"
    return None
