"""Whether a run trains with the plugin's trainer (``training.trainer: uvlp``, or a
trainer registered as a subclass of it), and the trainer's own keys
(``configs/trainers/uvlp.yaml``), declared for such runs only.

Importing this module is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

NAME = "uvlp"


def is_plugin_trainer(name: Any) -> bool:
    """Whether the trainer registered as ``name`` is the plugin's or a subclass of it (a
    user's trainer in ``env.user_dir``, which MMF imports before it merges the command line)."""
    if name == NAME:
        return True
    if not isinstance(name, str):
        return False
    from mmf.common.registry import registry

    base, trainer = registry.get_trainer_class(NAME), registry.get_trainer_class(name)
    return isinstance(base, type) and isinstance(trainer, type) and issubclass(trainer, base)


def chosen_by(config: Any) -> bool:
    """Whether the run of ``config`` (MMF's config, or None) trains with the plugin's trainer
    or a subclass of it."""
    if config is None:
        return False
    from omegaconf import OmegaConf

    try:
        name = OmegaConf.select(config, "training.trainer", default=None)
    except Exception:  # an unresolvable interpolation elsewhere does not matter here
        return False
    return is_plugin_trainer(name)


def switches() -> Dict[str, Any]:
    """The trainer's keys and their defaults (``configs/trainers/uvlp.yaml``)."""
    from omegaconf import OmegaConf

    from mmf_uvlp.utils.config_files import default_config

    return OmegaConf.to_container(OmegaConf.load(default_config("trainers", "uvlp.yaml")))


def declare_switches(config: Any, declared: Optional[Mapping[str, Any]] = None) -> None:
    """Give ``config`` (MMF's, struct or not) each of the trainer's keys it lacks, at its
    default; values already there (MMF's, a config file's) stay."""
    from omegaconf import DictConfig, open_dict

    for key, default in (switches() if declared is None else declared).items():
        if key not in config:
            with open_dict(config):
                config[key] = default
        elif isinstance(default, dict) and isinstance(config[key], DictConfig):
            declare_switches(config[key], default)
