"""Where the plugin's default configs and project configs are: inside the package, or in
the checkout.

A wheel carries them as ``mmf_uvlp/configs/`` and ``mmf_uvlp/projects/`` (the build copies
the checkout's ``configs/`` and ``projects/`` there, see ``hatch_build.py``); an editable
install or a checkout reads the checkout's folders beside the package. Builders' and models'
``config_path()``, the corpus builder's defaults and the study's recipes and project configs
resolve their yaml files here (:func:`home`).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def home() -> Path:
    """The folder holding ``configs/`` and ``projects/``: the package (a wheel) or the
    checkout."""
    return PACKAGE_DIR if (PACKAGE_DIR / "projects").is_dir() else PACKAGE_DIR.parent


def in_checkout() -> bool:
    """Whether the package runs from a checkout (its ``tools/`` beside it)."""
    return (PACKAGE_DIR.parent / "tools").is_dir() and home() == PACKAGE_DIR.parent


def configs_dir() -> Path:
    """The folder of the default configs: the package's own if it has one, else the checkout's."""
    packaged = PACKAGE_DIR / "configs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "configs"


def default_config(*parts: str) -> str:
    """Absolute path of ``configs/<parts...>``, e.g. ``default_config("models", "uvla", "defaults.yaml")``."""
    return str(configs_dir().joinpath(*parts))
