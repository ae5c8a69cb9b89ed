"""MMF main's ``training.persistent_workers`` on MMF 1.0.0rc10: DataLoader worker processes
(``training.num_workers > 0``) live across epochs and evaluations."""

from __future__ import annotations

from typing import Any


def install() -> None:
    """MMF 1.0.0rc10's DataLoaders keep their workers (``training.persistent_workers``)."""
    import mmf.utils.build as build
    from mmf.common.registry import registry

    add_extra_args = build._add_extra_args_for_dataloader

    def _add_extra_args_for_dataloader(dataset_instance: Any, other_args: Any = None) -> Any:
        other_args = add_extra_args(dataset_instance, other_args)
        config = registry.get("config", None, no_warning=True)
        training = (config.get("training") if config is not None else None) or {}
        if int(training.get("num_workers", 0) or 0) > 0:
            other_args["persistent_workers"] = bool(training.get("persistent_workers", True))
        return other_args

    build._add_extra_args_for_dataloader = _add_extra_args_for_dataloader
