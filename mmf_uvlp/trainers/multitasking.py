"""MMF main's ``multitasking`` mix of a multi-dataset run, on MMF 1.0.0rc10 (the ``uvlp``
trainer's loaders, :mod:`mmf_uvlp.trainers.rc10_loaders`).

``multitasking: {type: ratios, params: {sampling_ratios: ...}}`` or ``type: random``
choose the per-dataset sampling probabilities of training, as MMF main's iteration
strategies of those names; ``size_proportional`` keeps rc10's own choice.
"""

from __future__ import annotations

from typing import Any, List


def train_probabilities(multitasking: Any, datasets: List[str]) -> List[float]:
    """The per-dataset sampling probabilities of a ``multitasking`` config of type ``random``
    (uniform) or ``ratios`` (``params.sampling_ratios``: one non-negative number per dataset,
    normalized), as MMF main's iteration strategies of those names."""
    from mmf_uvlp.errors import UserConfigError

    if not multitasking.get("enabled", True) or multitasking.type not in ("random", "ratios"):
        raise UserConfigError(
            f"multitasking: enabled={multitasking.get('enabled')} "
            f"type={multitasking.type} is not available on MMF 1.0.0rc10; "
            "expected enabled=True with type size_proportional, random or "
            "ratios"
        )
    if multitasking.type == "random":
        return [1 / len(datasets)] * len(datasets)
    ratios = (multitasking.get("params") or {}).get("sampling_ratios") or {}
    missing = [name for name in datasets if name not in ratios]
    if missing:
        raise UserConfigError(
            f"multitasking.params.sampling_ratios has no ratio for {missing}; "
            f"expected one non-negative number for each of {datasets}"
        )
    weights = [float(ratios[name]) for name in datasets]
    if min(weights) < 0 or sum(weights) <= 0:
        raise UserConfigError(
            f"multitasking.params.sampling_ratios "
            f"{dict(zip(datasets, weights))}: expected non-negative numbers, "
            "at least one positive"
        )
    return [weight / sum(weights) for weight in weights]
