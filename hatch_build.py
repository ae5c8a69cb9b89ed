"""Wheel build hook: a wheel carries the plugin's default configs inside the package.

The checkout keeps them in ``configs/`` (beside ``mmf_uvlp/``); a standard wheel gets a
copy as ``mmf_uvlp/configs/``, which ``mmf_uvlp.utils.config_files`` reads first. An
editable install reads the checkout's folder, so nothing is copied for it.
"""

from __future__ import annotations

from typing import Any, Dict

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PackageConfigsHook(BuildHookInterface):
    """Adds ``configs/`` to a standard wheel as ``mmf_uvlp/configs/``."""

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        if version == "standard":
            build_data["force_include"]["configs"] = "mmf_uvlp/configs"
