"""Where the plugin's default configs are: inside the package, or in the checkout.

A wheel carries them as ``mmf_uvlp/configs/`` (the build copies the checkout's
``configs/`` there, see ``hatch_build.py``); an editable install or a checkout reads the
checkout's ``configs/`` beside the package. Builders' and models' ``config_path()`` and the
corpus builder's defaults resolve their yaml files here.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def configs_dir() -> Path:
    """The folder of the default configs: the package's own if it has one, else the checkout's."""
    packaged = PACKAGE_DIR / "configs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "configs"


def default_config(*parts: str) -> str:
    """Absolute path of ``configs/<parts...>``, e.g. ``default_config("models", "uvla", "defaults.yaml")``."""
    return str(configs_dir().joinpath(*parts))
