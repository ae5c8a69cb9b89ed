"""MMF main's ``training.persistent_workers`` on MMF 1.0.0rc10: DataLoader worker processes
(``training.num_workers > 0``) live across epochs and evaluations."""

from __future__ import annotations

from typing import Any, Dict, Mapping


def worker_arguments(training: Mapping[str, Any], num_workers: int) -> Dict[str, Any]:
    """The DataLoader arguments of ``training``'s workers beyond MMF 1.0.0rc10's own."""
    if int(num_workers or 0) > 0:
        return {"persistent_workers": bool(training.get("persistent_workers", True))}
    return {}
