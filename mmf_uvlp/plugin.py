"""Registration of the plugin's components into MMF's registry."""

import importlib

COMPONENT_MODULES = ()

_registered = False


def register_components() -> None:
    """Import every component module once; their decorators fill MMF's registry."""
    global _registered
    if _registered:
        return
    _registered = True
    for name in COMPONENT_MODULES:
        importlib.import_module(name)
