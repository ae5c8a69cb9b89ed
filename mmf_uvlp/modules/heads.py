"""Heads of the μ-VLA model, selected by name in ``model_config.uvla.heads``.

Every head reads the encoder output (:class:`Encoded`) and the batch and returns its
outputs, or ``None`` when the batch carries none of its targets (so one model serves
R-T, R-N and I-S batches without knowing which dataset fed it):

=================  ==============================  ======================================
name               needs in the batch              outputs
=================  ==============================  ======================================
mlm                ``lm_label_ids``                ``mlm_logits`` (M, V), ``mlm_index``
mrc                ``region_class_targets``        ``mrc_logits`` (M, C), ``mrc_index``
mrfr               ``region_features_target``,     ``mrfr_features`` (M, D), ``mrfr_index``
                   ``region_masked``
pmrtc              ``region_phrase_targets``       ``pmrtc_logits`` (M, V), ``pmrtc_index``
itm                (always)                        ``itm_logits`` (B, 2)
pooled_classifier  (always)                        ``scores`` (B, num_labels): VQA, VE
pair_classifier    two images per example          ``scores`` (B, num_labels): NLVR2
region_scorer      (always)                        ``scores`` (B, R): RefCOCO+
=================  ==============================  ======================================

``*_index`` is (M, 2): the (sample, position) of each selected token or region, in
row-major order; the losses read their targets there. A batch collated by
:func:`mmf_uvlp.datasets.collate.collate` brings these indices computed on the host
(``lm_label_index`` ...), so a head never waits for the device to count its targets;
other batches get them from ``nonzero`` on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from mmf_uvlp.batch import ragged

Outputs = Optional[Dict[str, torch.Tensor]]
PADDED_REGION_SCORE = -1e4


@dataclass
class Encoded:
    """The transformer's output, split back into its text and region parts."""

    text: torch.Tensor  # (B, L, H)
    regions: torch.Tensor  # (B, R, H)
    pooled: torch.Tensor  # (B, H), [CLS] or the token mean (the model's ``pooling``)
    region_mask: torch.Tensor  # (B, R), 1 = real region
    attentions: Optional[Tuple[torch.Tensor, ...]] = None  # per layer (B, heads, L+R, L+R)


def target_index(
    batch: Mapping[str, Any], field: str, selected: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """The host-computed index ``field`` of a collated batch, else ``selected().nonzero()``."""
    index = ragged(batch, field)
    if index is None:
        return selected().nonzero()
    return index


class PredictionMLP(nn.Sequential):
    """``Linear -> GELU -> LayerNorm -> Linear`` (UNITER's prediction heads)."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, layer_norm_eps: float = 1e-12):
        super().__init__(
            nn.Linear(in_dim, hidden_dim),
            nn.GELU(),
            nn.LayerNorm(hidden_dim, eps=layer_norm_eps),
            nn.Linear(hidden_dim, out_dim),
        )


def _selected(
    targets: Optional[torch.Tensor], hidden: torch.Tensor, field: str
) -> Optional[torch.Tensor]:
    """Check that ``targets`` (B, N, ...) lines up with ``hidden`` (B, N, H)."""
    if targets is not None and targets.shape[:2] != hidden.shape[:2]:
        raise ValueError(
            f"batch field '{field}' has shape {tuple(targets.shape)}, expected its first two "
            f"dimensions to be {tuple(hidden.shape[:2])} (batch, tokens/regions)"
        )
    return targets


class MaskedTokenHead(nn.Module):
    """``mlm``: vocabulary logits of the masked text / tag / phrase tokens."""

    def __init__(self, vocab_head: nn.Module):
        super().__init__()
        self.vocab_head = vocab_head  # tied to the word embeddings, shared with pmrtc

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        labels = _selected(batch.get("lm_label_ids"), encoded.text, "lm_label_ids")  # (B, L)
        if labels is None:
            return None
        index = target_index(batch, "lm_label_index", lambda: labels != -1)  # (M, 2)
        hidden = encoded.text[index[:, 0], index[:, 1]]  # (M, H)
        return {"mlm_logits": self.vocab_head(hidden), "mlm_index": index}


class RegionClassHead(nn.Module):
    """``mrc``: detector-class logits of masked regions."""

    def __init__(self, hidden_size: int, num_region_classes: int, layer_norm_eps: float):
        super().__init__()
        self.classifier = PredictionMLP(
            hidden_size, hidden_size, num_region_classes, layer_norm_eps
        )

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        targets = _selected(
            batch.get("region_class_targets"), encoded.regions, "region_class_targets"
        )  # (B, R)
        if targets is None:
            return None
        index = target_index(batch, "region_class_index", lambda: targets != -1)  # (M, 2)
        hidden = encoded.regions[index[:, 0], index[:, 1]]  # (M, H)
        return {"mrc_logits": self.classifier(hidden), "mrc_index": index}


class FeatureRegressionHead(nn.Module):
    """``mrfr``: predicted original features of masked regions."""

    def __init__(self, hidden_size: int, feature_dim: int, layer_norm_eps: float):
        super().__init__()
        self.regressor = PredictionMLP(hidden_size, hidden_size, feature_dim, layer_norm_eps)

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        if batch.get("region_features_target") is None:
            return None
        masked = _selected(batch.get("region_masked"), encoded.regions, "region_masked")
        if masked is None:
            raise ValueError("batch has 'region_features_target' but no 'region_masked' (B, R)")
        index = target_index(
            batch, "region_masked_index", lambda: (masked != 0) & (encoded.region_mask != 0)
        )  # (M, 2)
        hidden = encoded.regions[index[:, 0], index[:, 1]]  # (M, H)
        return {"mrfr_features": self.regressor(hidden), "mrfr_index": index}


class PhraseTokenHead(nn.Module):
    """``pmrtc``: vocabulary logits of masked regions linked to a noun phrase (p-MRTC)."""

    def __init__(self, vocab_head: nn.Module):
        super().__init__()
        self.vocab_head = vocab_head  # the MLM head: regions are classified into word-pieces

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        phrases = _selected(
            batch.get("region_phrase_targets"), encoded.regions, "region_phrase_targets"
        )  # (B, R, P)
        if phrases is None:
            return None
        index = target_index(
            batch, "region_phrase_index", lambda: (phrases != -1).any(-1)
        )  # (M, 2)
        hidden = encoded.regions[index[:, 0], index[:, 1]]  # (M, H)
        return {"pmrtc_logits": self.vocab_head(hidden), "pmrtc_index": index}


class MatchingHead(nn.Module):
    """``itm``: image-text match logits (class 1 = match) from the pooled output."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.classifier = nn.Linear(hidden_size, 2)

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        return {"itm_logits": self.classifier(encoded.pooled)}  # (B, 2)


class PooledClassifierHead(nn.Module):
    """``pooled_classifier``: ``scores`` (B, num_labels) from the pooled output
    ([CLS] or the token mean, the model's ``pooling``).

    VQA: num_labels 3129 with MMF's soft-score ``logit_bce``; VE: 3 with ``cross_entropy``.
    """

    def __init__(self, hidden_size: int, num_labels: int, dropout: float, layer_norm_eps: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = PredictionMLP(hidden_size, 2 * hidden_size, num_labels, layer_norm_eps)

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        return {"scores": self.classifier(self.dropout(encoded.pooled))}


class PairClassifierHead(nn.Module):
    """``pair_classifier``: NLVR2. The model encodes the 2B (image, sentence) pairs as
    [all first images; all second images]; the two pooled outputs of an example are
    concatenated -> MLP -> ``scores`` (B, num_labels)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float, layer_norm_eps: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = PredictionMLP(
            2 * hidden_size, 2 * hidden_size, num_labels, layer_norm_eps
        )

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        pooled = encoded.pooled  # (2B, H)
        if pooled.size(0) % 2:
            raise ValueError(
                "pair_classifier needs two images per example (img0 / img1 in the batch)"
            )
        half = pooled.size(0) // 2
        pair = torch.cat([pooled[:half], pooled[half:]], dim=-1)  # (B, 2H)
        return {"scores": self.classifier(self.dropout(pair))}


class RegionScorerHead(nn.Module):
    """``region_scorer``: RefCOCO+; one score per region, padding at -1e4: ``scores`` (B, R)."""

    def __init__(self, hidden_size: int, dropout: float, layer_norm_eps: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.scorer = PredictionMLP(hidden_size, hidden_size, 1, layer_norm_eps)

    def forward(self, encoded: Encoded, batch: Mapping[str, Any]) -> Outputs:
        scores = self.scorer(self.dropout(encoded.regions)).squeeze(-1)  # (B, R)
        return {"scores": scores.masked_fill(encoded.region_mask == 0, PADDED_REGION_SCORE)}
