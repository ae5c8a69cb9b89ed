"""Per-sample reduction shared by the μ-VLA losses.

Every loss computes one value per *target* (a masked token, a masked region, an ITM
pair), averages the targets of each sample into a per-sample loss ``l_i``, multiplies it
by the sample's curriculum weight ``w_i`` (``model_output["curriculum_weights"]``, 1
when absent) and averages over the samples that have at least one target:

    loss = sum_i w_i * l_i / #{i : sample i has a target}

A batch without any target gives a zero that still belongs to the autograd graph (so a
backward pass over the summed losses never fails).
"""

from __future__ import annotations

from typing import Any, Mapping, Tuple

import torch

from mmf_uvlp.errors import UserConfigError

Fields = Mapping[str, Any]  # a SampleList or a model output


def sample_weights(model_output: Fields, batch_size: int, like: torch.Tensor) -> torch.Tensor:
    """The curriculum weights (B,) from the model output, or ones."""
    weights = model_output.get("curriculum_weights")
    if weights is None:
        return torch.ones(batch_size, dtype=like.dtype, device=like.device)
    if weights.shape != (batch_size,):
        raise ValueError(
            f"model_output['curriculum_weights'] must have shape ({batch_size},), "
            f"got {tuple(weights.shape)}"
        )
    return weights.to(like.dtype)


def per_sample_mean(
    values: torch.Tensor, sample_index: torch.Tensor, batch_size: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean of ``values`` (M,) per sample; returns (means (B,), has_target (B,) bool)."""
    sums = values.new_zeros(batch_size).index_add(0, sample_index, values)
    counts = values.new_zeros(batch_size).index_add(0, sample_index, torch.ones_like(values))
    has_target = counts > 0
    return sums / counts.clamp(min=1), has_target


def weighted_sample_mean(
    values: torch.Tensor,
    sample_index: torch.Tensor,
    batch_size: int,
    model_output: Fields,
) -> torch.Tensor:
    """``sum_i w_i * l_i / #samples with targets`` for per-target ``values`` (M,)."""
    means, has_target = per_sample_mean(values, sample_index, batch_size)  # (B,), (B,)
    weights = sample_weights(model_output, batch_size, values)  # (B,)
    return (weights * means).sum() / has_target.sum().clamp(min=1)


def zero_loss(model_output: Fields) -> torch.Tensor:
    """A zero loss on the device of the model output (its head was not computed)."""
    for value in model_output.values():
        if isinstance(value, torch.Tensor):
            return value.new_zeros((), dtype=torch.float32)
    return torch.zeros(())


def require_field(sample_list: Fields, field: str, loss_name: str) -> torch.Tensor:
    """``sample_list[field]``, or a :class:`UserConfigError` naming the loss, the field and
    what to set (a pre-training loss on a dataset without its targets is a config mistake)."""
    value = sample_list.get(field)
    if value is None:
        dataset = sample_list.get("dataset_name", None)
        raise UserConfigError(
            f"loss {loss_name}: the batch{f' of dataset {dataset!r}' if dataset else ''} has "
            f"no field '{field}' (its targets): take {loss_name} out of "
            "model_config.<model>.losses, or for the uvla model leave heads and losses null "
            "to get the heads of the dataset's task (model_config.uvla.tasks)"
        )
    return value
