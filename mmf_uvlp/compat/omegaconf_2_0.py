"""omegaconf 2.0's semantics, which MMF 1.0.0rc10 was written for, on omegaconf 2.3: a missing
key of a non-struct config reads None, ``DictConfig.pretty``, the ``env`` resolver, and
resolvers that survive rc10's ``OmegaConf.clear_resolvers()``."""

from __future__ import annotations

import os
from typing import Any


def legacy_env_resolver(key: str, default: Any = None) -> Any:
    value = os.environ.get(key.strip())
    if value is None:
        return default.strip() if isinstance(default, str) else default
    return value


def restore_semantics() -> None:
    """Missing keys read None, ``pretty``, ``env``, and resolvers kept across clears."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    getattr_ = DictConfig.__getattr__
    getitem_ = DictConfig.__getitem__

    def _missing_reads_none(config: DictConfig, key: Any) -> bool:
        return not config._get_flag("struct") and key not in config

    def __getattr__(self: DictConfig, key: str) -> Any:
        try:
            return getattr_(self, key)
        except ConfigAttributeError:
            if _missing_reads_none(self, key):
                return None
            raise

    def __getitem__(self: DictConfig, key: Any) -> Any:
        try:
            return getitem_(self, key)
        except ConfigKeyError:
            if _missing_reads_none(self, key):
                return None
            raise

    DictConfig.__getattr__ = __getattr__
    DictConfig.__getitem__ = __getitem__
    DictConfig.pretty = lambda self, resolve=False: OmegaConf.to_yaml(self, resolve=resolve)

    from omegaconf.basecontainer import BaseContainer

    clear_resolvers = OmegaConf.clear_resolvers
    mmf_resolvers = {"device_count", "resolve_cache_dir", "resolve_dir"}

    def _register_env() -> None:
        if not OmegaConf.has_resolver("env"):
            OmegaConf.register_new_resolver("env", legacy_env_resolver)

    def clear_then_keep_env() -> None:
        kept = {k: v for k, v in BaseContainer._resolvers.items() if k not in mmf_resolvers}
        clear_resolvers()
        BaseContainer._resolvers.update(kept)
        _register_env()

    OmegaConf.clear_resolvers = staticmethod(clear_then_keep_env)
    _register_env()
