"""Wheel build hook: a wheel carries the plugin's default configs and project configs
inside the package.

The checkout keeps them in ``configs/`` and ``projects/`` (beside ``mmf_uvlp/``); a standard
wheel gets copies as ``mmf_uvlp/configs/`` and ``mmf_uvlp/projects/``, which
``mmf_uvlp.utils.config_files`` reads first. An editable install reads the checkout's
folders, so nothing is copied for it.
"""

from __future__ import annotations

from typing import Any, Dict

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PackageConfigsHook(BuildHookInterface):
    """Adds ``configs/`` and ``projects/`` to a standard wheel inside ``mmf_uvlp/``."""

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        if version == "standard":
            build_data["force_include"]["configs"] = "mmf_uvlp/configs"
            build_data["force_include"]["projects"] = "mmf_uvlp/projects"
