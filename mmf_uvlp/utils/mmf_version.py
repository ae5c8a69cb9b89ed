"""Which MMF is installed, read once from its package metadata (without importing MMF): the
one way the plugin tells MMF 1.0.0rc10 (the package index) from MMF's main branch.

Importing this module is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

import importlib.metadata
from typing import Optional

RC10_VERSION = "1.0.0rc10"
# The version of MMF's main branch (never released to the package index).
MMF_MAIN_VERSION = "1.0.0rc12"


def installed_mmf_version() -> Optional[str]:
    """Version of the installed ``mmf`` distribution, without importing it."""
    try:
        return importlib.metadata.version("mmf")
    except importlib.metadata.PackageNotFoundError:
        return None


def mmf_main_installed() -> bool:
    """Whether the installed MMF is MMF's main branch."""
    return installed_mmf_version() == MMF_MAIN_VERSION
