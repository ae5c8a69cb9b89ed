"""MMF's ``Configuration`` (1.0.0rc10 and main): the defaults rc10 reads that its published
yaml lacks, ``model`` and ``datasets`` from the config file, and a relative ``env.data_dir``
taken from the working directory."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

# Keys rc10 reads that the rc7 defaults.yaml (the newest one published) lacks. Values are
# rc10's defaults. (The uvlp trainer's own keys: configs/trainers/uvlp.yaml.)
RC10_DEFAULTS = {
    "training": {
        # rc10 sends stdout into its log file when true; false keeps progress on
        # the console (the log file is written either way).
        "stdout_capture": False,
        "detect_anomaly": False,
    },
}


def default_config_keys() -> None:
    """rc10's default config, with :data:`RC10_DEFAULTS` under it."""
    from omegaconf import OmegaConf

    from mmf.utils.configuration import Configuration

    build_default_config = Configuration._build_default_config

    def _build_default_config(self: Configuration) -> Any:
        return OmegaConf.merge(OmegaConf.create(RC10_DEFAULTS), build_default_config(self))

    Configuration._build_default_config = _build_default_config


def model_and_datasets_from_file() -> None:
    """``model`` and ``dataset(s)`` read from the config file when the command line has none."""
    from mmf.utils.configuration import Configuration

    build_model_config = Configuration._build_model_config
    build_dataset_config = Configuration._build_dataset_config

    def _from_file(self: Configuration, opts_config: Any, keys: tuple) -> None:
        if all(opts_config.get(key) is None for key in keys):
            for key in keys:
                if self._user_config.get(key) is not None:
                    opts_config[key] = self._user_config.get(key)

    def _build_model_config(self: Configuration, opts_config: Any) -> Any:
        _from_file(self, opts_config, ("model",))
        return build_model_config(self, opts_config)

    def _build_dataset_config(self: Configuration, opts_config: Any) -> Any:
        _from_file(self, opts_config, ("dataset", "datasets"))
        dataset_config = build_dataset_config(self, opts_config)
        if self._user_config.get("dataset") is not None and not self._user_config.get("datasets"):
            # the final config reads `datasets`; a file naming one `dataset` must set it too
            self._user_config["datasets"] = self._user_config.get("dataset")
        return dataset_config

    Configuration._build_model_config = _build_model_config
    Configuration._build_dataset_config = _build_dataset_config


def _data_dir_from_working_directory(update_specific: Callable) -> Callable:
    """Wrap ``Configuration._update_specific`` so that a relative ``env.data_dir`` is made
    absolute against the working directory before anything joins it to MMF's root."""

    @functools.wraps(update_specific)
    def _update_specific(self: Any, config: Any) -> Any:
        from omegaconf import OmegaConf

        data_dir = OmegaConf.select(config, "env.data_dir", default=None)
        if (
            isinstance(data_dir, str)
            and data_dir
            and "://" not in data_dir
            and not os.path.isabs(data_dir)
        ):
            config.env.data_dir = os.path.abspath(os.path.expanduser(data_dir))
        return update_specific(self, config)

    return _update_specific


def relative_data_dir() -> None:
    """A relative ``env.data_dir`` is made absolute against the working directory."""
    from mmf.utils.configuration import Configuration

    Configuration._update_specific = _data_dir_from_working_directory(
        Configuration._update_specific
    )
