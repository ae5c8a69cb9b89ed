"""``visual_bert_uvlp``: MMF's own VisualBERT plus the two heads rc10 lacks.

rc10's ``visual_bert`` pre-trains with the masked-LM loss only (its image-text matching
head, BERT's ``cls.seq_relationship`` on the pooled output, is computed and dropped) and
has no head scoring regions (RefCOCO+). This model is MMF's ``VisualBERT`` unchanged —
same modules, state-dict keys, inputs and losses — with:

- ``itm_loss_weight`` (> 0, pre-training): the cross-entropy of that matching head against
  the batch's ``is_correct`` (MMF's masked datasets with ``false_caption``), added to
  MMF's losses as ``<dataset>/<split>/itm_loss``;
- ``training_head_type: region_scorer`` (RefCOCO+): MMF's VisualBERT encoder and our
  :class:`RegionScorerHead` over its region outputs, ``scores`` (B, R), padding at -1e4.

Its settings are MMF's ``model_config.visual_bert`` (the defaults file points this model's
node at it), so MMF's benchmark configs and command-line overrides apply unchanged, and a
checkpoint's ``model.bert.*`` weights load with MMF's ``pretrained_state_mapping``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from mmf.common.registry import registry
from mmf.models.visual_bert import VisualBERT, VisualBERTForClassification
from omegaconf import OmegaConf
from torch import nn

from mmf_uvlp.modules.alignment import RecoveredMatchingLoss
from mmf_uvlp.modules.heads import Encoded, RegionScorerHead
from mmf_uvlp.utils.config_files import default_config

REGION_SCORER = "region_scorer"


def classification_config(config: Any) -> Any:
    """A copy of a model config as MMF's classification head expects it (1 label)."""
    plain = OmegaConf.to_container(config, resolve=True)
    return OmegaConf.create({**plain, "training_head_type": "classification", "num_labels": 1})


class VisualBERTForRegionScoring(nn.Module):
    """MMF's VisualBERT encoder with one score per region (the RefCOCO+ head).

    ``forward`` takes the arguments MMF's ``VisualBERT.forward`` passes to its heads; the
    attributes ``config``, ``bert`` and ``classifier`` are those MMF's optimizer grouping
    (``get_optimizer_parameters_for_bert``) reads.
    """

    def __init__(self, config: Any):
        super().__init__()
        self.config = config
        self.bert = VisualBERTForClassification(classification_config(config)).bert
        bert = self.bert.config
        self.classifier = RegionScorerHead(
            bert.hidden_size, bert.hidden_dropout_prob, bert.layer_norm_eps
        )
        self.classifier.apply(self.bert._init_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        visual_embeddings: Optional[torch.Tensor] = None,
        position_embeddings_visual: Optional[torch.Tensor] = None,
        visual_embeddings_type: Optional[torch.Tensor] = None,
        image_text_alignment: Optional[torch.Tensor] = None,
        masked_lm_labels: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """input_ids (B, L); attention_mask (B, L+R) = [text mask; region mask];
        visual_embeddings (B, R, D) -> ``scores`` (B, R)."""
        sequence, pooled, _ = self.bert(
            input_ids,
            attention_mask,
            token_type_ids,
            visual_embeddings,
            position_embeddings_visual,
            visual_embeddings_type,
            image_text_alignment,
        )
        length = input_ids.size(1)
        encoded = Encoded(
            text=sequence[:, :length],
            regions=sequence[:, length:],
            pooled=pooled,
            region_mask=attention_mask[:, length:],
        )
        return self.classifier(encoded, {})


@registry.register_model("visual_bert_uvlp")
class VisualBERTUVLP(VisualBERT):
    """MMF's VisualBERT with the ITM loss in pre-training and a RefCOCO+ region scorer."""

    @classmethod
    def config_path(cls) -> str:
        return default_config("models", "visual_bert_uvlp", "defaults.yaml")

    def build(self) -> None:
        if self.config.training_head_type == REGION_SCORER:
            self.model = VisualBERTForRegionScoring(self.config)
            if self.config.special_visual_initialize:
                self.model.bert.embeddings.initialize_visual_from_pretrained()
            if self.config.get("freeze_base", False):
                for parameter in self.model.bert.parameters():
                    parameter.requires_grad = False
        else:
            super().build()
        # (MLM scores, ITM logits)
        self.alignment = RecoveredMatchingLoss.of(self.config, self.model, index=1)

    def forward(self, sample_list: Any) -> Dict[str, Any]:
        output = super().forward(sample_list)
        if self.alignment is not None:
            self.alignment.add_to(output, sample_list)
        return output
