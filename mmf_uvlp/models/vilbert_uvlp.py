"""``vilbert_uvlp``: MMF's own two-stream ViLBERT plus the two heads rc10 lacks.

rc10's ``vilbert`` pre-trains with masked-LM and masked-region (KL to the detector's class
distribution) losses; its multi-modal alignment head (``cls.bi_seq_relationship`` on the
fused pooled outputs, the paper's alignment prediction) is computed and dropped, and no
head scores regions (RefCOCO+). This model is MMF's ``ViLBERT`` unchanged — same modules,
state-dict keys, inputs and losses — with:

- ``itm_loss_weight`` (> 0, pre-training): the cross-entropy of that alignment head
  against the batch's ``is_correct`` (MMF's masked datasets with ``false_caption``), added
  to MMF's losses as ``<dataset>/<split>/itm_loss``;
- ``training_head_type: region_scorer`` (RefCOCO+): MMF's ViLBERT encoder and our
  :class:`RegionScorerHead` over the image stream's outputs, ``scores`` (B, R).

Its settings are MMF's ``model_config.vilbert`` (the defaults file points this model's node
at it), so MMF's benchmark configs and command-line overrides apply unchanged, and a
checkpoint's ``model.bert.*`` weights load with MMF's ``pretrained_state_mapping``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from mmf.common.registry import registry
from mmf.models.vilbert import ViLBERT, ViLBERTForClassification
from torch import nn

from mmf_uvlp.models.visual_bert_uvlp import REGION_SCORER, classification_config
from mmf_uvlp.modules.alignment import RecoveredMatchingLoss
from mmf_uvlp.modules.heads import Encoded, RegionScorerHead
from mmf_uvlp.utils.config_files import default_config


class ViLBERTForRegionScoring(nn.Module):
    """MMF's ViLBERT encoder with one score per region of the image stream (RefCOCO+).

    ``forward`` takes the arguments MMF's ``ViLBERT.forward`` passes to its heads; the
    attributes ``config``, ``bert`` and ``classifier`` are those MMF's optimizer grouping
    (``get_optimizer_parameters_for_bert``) reads.
    """

    def __init__(self, config: Any):
        super().__init__()
        self.config = config
        self.bert = ViLBERTForClassification(classification_config(config)).bert
        self.classifier = RegionScorerHead(
            int(config.v_hidden_size),
            float(config.v_hidden_dropout_prob),
            float(config.layer_norm_eps),
        )
        self.classifier.apply(self.bert._init_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        image_feature: torch.Tensor,
        image_location: torch.Tensor,
        token_type_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_attention_mask: Optional[torch.Tensor] = None,
        *unused: Any,
    ) -> Dict[str, torch.Tensor]:
        """input_ids (B, L); image_feature (B, R, D); image_location (B, R, 5);
        image_attention_mask (B, R) -> ``scores`` (B, R)."""
        text, regions, _, pooled_image, _ = self.bert(
            input_ids,
            image_feature,
            image_location,
            token_type_ids,
            attention_mask,
            image_attention_mask,
            output_all_encoded_layers=False,
        )
        if image_attention_mask is None:
            image_attention_mask = torch.ones(
                regions.shape[:2], dtype=torch.long, device=regions.device
            )
        encoded = Encoded(
            text=text, regions=regions, pooled=pooled_image, region_mask=image_attention_mask
        )
        return self.classifier(encoded, {})


@registry.register_model("vilbert_uvlp")
class ViLBERTUVLP(ViLBERT):
    """MMF's ViLBERT with the alignment loss in pre-training and a RefCOCO+ region scorer."""

    @classmethod
    def config_path(cls) -> str:
        return default_config("models", "vilbert_uvlp", "defaults.yaml")

    def build(self) -> None:
        if self.config.training_head_type == REGION_SCORER:
            self.model = ViLBERTForRegionScoring(self.config)
            if self.config.get("freeze_base", False):
                for parameter in self.model.bert.parameters():
                    parameter.requires_grad = False
        else:
            super().build()
        # (text scores, region scores, alignment logits)
        self.alignment = RecoveredMatchingLoss.of(self.config, self.model, index=2)

    def forward(self, sample_list: Any) -> Dict[str, Any]:
        output = super().forward(sample_list)
        if self.alignment is not None:
            self.alignment.add_to(output, sample_list)
        return output
