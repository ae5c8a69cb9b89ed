"""The dataset loaders of the ``uvlp`` trainer on MMF 1.0.0rc10, built outside a run: what a
benchmark of the data path or a test of its batches pulls from, as training would."""

from __future__ import annotations

from typing import Any, Sequence

REGISTERED = ("config", "current_device", "writer", "seed")  # what MMF's loaders read there


class _QuietWriter:
    """MMF's ``writer`` that logs nothing."""

    def write(self, *args: Any, **kwargs: Any) -> None:
        """Nothing is logged."""


def seeded_loaders(opts: Sequence[str], seed: int = 0) -> Any:
    """The trainer's :class:`~mmf_uvlp.trainers.rc10_loaders.SeededDatasetLoader` for MMF's
    command-line ``opts`` (``config=...``, overrides), its datasets loaded, on the CPU.

    MMF's loaders read the run's config, device, writer and seed from MMF's registry: they
    are registered there (the keys of ``REGISTERED``; a caller that must leave the registry
    as it was saves those first)."""
    import argparse

    import torch
    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    from mmf_uvlp.trainers.rc10_loaders import SeededDatasetLoader

    setup_imports()
    config = Configuration(argparse.Namespace(config_override=None, opts=list(opts))).get_config()
    registry.register("config", config)
    registry.register("current_device", torch.device("cpu"))
    registry.register("writer", _QuietWriter())
    registry.register("seed", seed)
    loader = SeededDatasetLoader(config)
    loader.load_datasets()
    return loader
