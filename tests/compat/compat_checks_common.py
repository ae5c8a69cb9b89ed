"""The registry of the compatibility checks and what several of them use."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List

CHECKS: Dict[str, Callable[[], None]] = {}


def check(name: str) -> Callable:
    def decorator(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = fn
        return fn

    return decorator


def _empty_config_file(text: str = "{}\n") -> str:
    """An empty user config (``config=`` of a check without one: MMF main reads
    ``opts.config`` without a default), or one holding ``text``, removed when the process
    ends."""
    import atexit
    import os
    import tempfile

    handle, path = tempfile.mkstemp(suffix=".yaml")
    os.write(handle, text.encode())
    os.close(handle)
    atexit.register(os.remove, path)
    return path


# The checks of the entry point's behaviour configure runs of the plugin's trainer: that
# behaviour acts on those only (tests/training/test_trainer_choice.py checks MMF's own runs).
PLUGIN_RUN = "training:\n  trainer: uvlp\n"


def _plugin_run() -> None:
    """Register the config of a plugin run, for checks that call MMF's classes directly."""
    _configuration(["model=visual_bert", "dataset=vqa2"])


def _configuration(opts: List[str]) -> Any:
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    if not any(opt.startswith("config=") for opt in opts):
        opts = [f"config={_empty_config_file(PLUGIN_RUN)}", *opts]
    return Configuration(argparse.Namespace(config_override=None, opts=opts))
