"""The seed MMF registered for a run, which the plugin's data order and evaluation stream
derive their generators from."""

from __future__ import annotations


def run_seed() -> int:
    """The seed MMF registered for the run (0 before it did)."""
    from mmf.common.registry import registry

    seed = registry.get("seed", None, no_warning=True)
    return 0 if seed is None else int(seed)
