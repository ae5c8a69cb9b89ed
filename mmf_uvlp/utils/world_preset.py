"""Which toy world the run configs of ``projects/uvla`` read: ``${uvlp_preset:}``.

``$PRESET``, the variable that ``make toy-world corpus`` reads too, names the world: unset,
the demo world; ``tiny`` moves every line of the Quick start to the tiny world at once.
``projects/uvla/toy_world.yaml`` holds what each world sets (its folder, feature size and
schedule), so a run's config shows them; a world without features is refused in one line.
"""

from __future__ import annotations

import os

from mmf_uvlp.errors import UserConfigError

VARIABLE = "PRESET"
DEFAULT = "demo"
WORLDS = ("demo", "tiny", "calibrated")


def world_preset() -> str:
    """The toy-world preset named by ``$PRESET`` (unset or empty: ``demo``)."""
    value = os.environ.get(VARIABLE, "").strip() or DEFAULT
    if value not in WORLDS:
        raise UserConfigError(
            f"${VARIABLE}={value!r}: the run configs of projects/uvla train on the toy worlds "
            f"{', '.join(WORLDS)}; unset {VARIABLE} for the demo world, or set env.data_dir, "
            "model_config.uvla.feature_dim and training.max_updates for another"
        )
    return value


def register_resolver() -> None:
    """Make ``${uvlp_preset:}`` available to OmegaConf (MMF's configs)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("uvlp_preset"):
        OmegaConf.register_new_resolver("uvlp_preset", world_preset)
