"""Whether a run trains with the plugin's trainer (``training.trainer: uvlp``), and the
trainer's own switches (``configs/trainers/uvlp.yaml``), declared for such runs only.

Importing this module is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

from typing import Any, Dict

NAME = "uvlp"


def chosen_by(config: Any) -> bool:
    """Whether the run of ``config`` (MMF's config, or None) trains with the plugin's trainer."""
    if config is None:
        return False
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, "training.trainer", default=None) == NAME
    except Exception:  # an unresolvable interpolation elsewhere does not matter here
        return False


def switches() -> Dict[str, Dict[str, Any]]:
    """The trainer's switches and their defaults, by config section (``configs/trainers/uvlp.yaml``)."""
    from omegaconf import OmegaConf

    from mmf_uvlp.utils.config_files import default_config

    return OmegaConf.to_container(OmegaConf.load(default_config("trainers", "uvlp.yaml")))


def declare_switches(config: Any) -> None:
    """Give ``config`` (MMF's, struct or not) each of the trainer's switches it lacks, at its
    default; values already there, from a config file, stay."""
    from omegaconf import OmegaConf, open_dict

    for section, keys in switches().items():
        with open_dict(config):
            if OmegaConf.select(config, section, default=None) is None:
                config[section] = {}
        node = config[section]
        with open_dict(node):
            for key, default in keys.items():
                if key not in node:
                    node[key] = default
