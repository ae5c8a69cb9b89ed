"""MMF main's ``multitasking`` mix of a multi-dataset run, on MMF 1.0.0rc10.

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
    from mmf_uvlp.utils.user_config import UserConfigError

    if not multitasking.get("enabled", True) or multitasking.type not in ("random", "ratios"):
        raise UserConfigError(f"multitasking: enabled={multitasking.get('enabled')} "
                              f"type={multitasking.type} is not available on MMF 1.0.0rc10; "
                              "expected enabled=True with type size_proportional, random or "
                              "ratios")
    if multitasking.type == "random":
        return [1 / len(datasets)] * len(datasets)
    ratios = (multitasking.get("params") or {}).get("sampling_ratios") or {}
    missing = [name for name in datasets if name not in ratios]
    if missing:
        raise UserConfigError(f"multitasking.params.sampling_ratios has no ratio for {missing}; "
                              f"expected one non-negative number for each of {datasets}")
    weights = [float(ratios[name]) for name in datasets]
    if min(weights) < 0 or sum(weights) <= 0:
        raise UserConfigError(f"multitasking.params.sampling_ratios "
                              f"{dict(zip(datasets, weights))}: expected non-negative numbers, "
                              "at least one positive")
    return [weight / sum(weights) for weight in weights]


def install() -> None:
    """MMF 1.0.0rc10's MultiDatasetLoader samples training datasets by ``multitasking``."""
    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

    infer = MultiDatasetLoader._infer_dataset_probabilities

    def _infer_dataset_probabilities(self: MultiDatasetLoader) -> None:
        infer(self)
        multitasking = self.config.get("multitasking")
        if (self._dataset_type != "train" or multitasking is None
                or (multitasking.get("enabled", True) and multitasking.type == "size_proportional")):
            return  # rc10's own choice: training.dataset_size_proportional_sampling
        self._dataset_probabilities = train_probabilities(multitasking, list(self._given_datasets))
        self._proportional_sampling = False
        self.writer.write(
            "Using per-dataset sampling probabilities: " + ", ".join(
                f"{name}: {p:.3f}" for name, p in zip(self._given_datasets,
                                                      self._dataset_probabilities)))

    next_ = MultiDatasetLoader.__next__

    def __next__(self: MultiDatasetLoader) -> Any:
        # without proportional sampling an epoch ends when a dataset runs out once every
        # dataset was drawn; one with ratio 0 is never drawn, and the loader would spin
        for index, probability in enumerate(self._dataset_probabilities):
            if probability == 0:
                self._used_once[index] = 1
        return next_(self)

    MultiDatasetLoader._infer_dataset_probabilities = _infer_dataset_probabilities
    MultiDatasetLoader.__next__ = __next__
