"""VL-BERT (Su et al., ICLR 2020): one BERT over ``[CLS] text [SEP] regions [END]`` (MMF model
``vl_bert``).

Reads top to bottom: inputs -> embeddings (:class:`VLBERTEmbeddings`) -> BERT encoder ->
heads. Everything but the embeddings and the sequence layout is ``uvla``'s single-stream
machinery, inherited: the BERT from ``bert_model_name`` (or random from ``bert_config``)
and ``bert_layers``, the batch fields (uvla's contract, MMF's ``image_feature_0`` /
``image_info_0``, NLVR2's ``img0`` / ``img1`` pairs, text-only batches with
``text_only_batches: true``), the heads and losses chosen by name, and loading a
pre-trained checkpoint's embeddings, encoder and pooler (``pretrained_checkpoint``).

Heads (``model_config.vl_bert.heads``): pre-training ``mlm`` (masked language modelling
with visual clues; text-only batches too) and ``mrc`` (masked RoI classification with
linguistic clues: the detector's class of each masked region, ``region_class_targets``);
no sentence-image matching (the paper found it hurts). Fine-tuning: ``pooled_classifier``
(VQA, VE), ``pair_classifier`` (NLVR2), ``region_scorer`` (RefCOCO+), shared with uvla so
every system of Table 1 has the same task heads.

Masking: a region flagged in ``region_masked`` (B, R) reaches no element: its features
are zeroed in its own element and left out of the whole-image feature every text element
and ``[END]`` carry (see :mod:`mmf_uvlp.modules.vl_bert_embeddings`).

Encoded output: ``text`` (B, L, H), ``regions`` (B, R, H), ``pooled`` (B, H) from
``[CLS]``; the ``[END]`` output is only attended to.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

import torch
from mmf.common.registry import registry
from torch import nn
from transformers import BertForPreTraining

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.models.uvla import TASK_HEADS, UVLA
from mmf_uvlp.modules.heads import Encoded
from mmf_uvlp.modules.pooling import pool
from mmf_uvlp.modules.vl_bert_embeddings import VLBERTEmbeddings
from mmf_uvlp.utils.config_files import default_config

VL_BERT_PRETRAINING_HEADS = ("mlm", "mrc")


@registry.register_model("vl_bert")
class VLBERT(UVLA):
    """VL-BERT pre-training and fine-tuning; ``config`` is ``model_config.vl_bert``."""

    config_key = "vl_bert"

    @classmethod
    def config_path(cls) -> str:
        return default_config("models", "vl_bert", "defaults.yaml")

    def _build_embeddings(self, bert: BertForPreTraining) -> nn.Module:
        geometry_dim = self._whole_number("geometry_dim", self._required("geometry_dim"), 8)
        if geometry_dim % 8:
            raise UserConfigError(
                f"model_config.vl_bert.geometry_dim must be a multiple of 8 (sin and cos of "
                f"each box coordinate), got {geometry_dim}"
            )
        if bert.config.type_vocab_size != 2:
            raise UserConfigError(
                "model_config.vl_bert: VL-BERT extends a BERT with 2 token types (A, B); "
                f"the configured BERT has {bert.config.type_vocab_size}"
            )
        return VLBERTEmbeddings(
            bert.bert.embeddings,
            feature_dim=self.feature_dim,
            geometry_dim=geometry_dim,
            initializer_range=bert.config.initializer_range,
            layer_norm_eps=bert.config.layer_norm_eps,
        )

    def _init_new_weights(self, bert: BertForPreTraining) -> None:
        super()._init_new_weights(bert)
        self.embeddings.start_text_visual_at_zero()

    def _head_names(self) -> List[str]:
        names = self.head_spec.heads
        allowed = VL_BERT_PRETRAINING_HEADS + TASK_HEADS
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise UserConfigError(
                f"model_config.vl_bert.heads: unknown {unknown}; VL-BERT has {allowed}"
            )
        if sum(name in TASK_HEADS for name in names) > 1:
            raise UserConfigError(
                f"model_config.vl_bert.heads: at most one of {TASK_HEADS} (each writes 'scores')"
            )
        return names

    def encode(
        self, sample_list: Mapping[str, Any], output_attentions: Optional[bool] = None
    ) -> Encoded:
        """Run the transformer over [text; regions; END] and split its output back."""
        if output_attentions is None:
            output_attentions = self.output_attentions
        inputs = self._inputs(sample_list)
        masked = self._region_masked(sample_list, inputs.region_mask)
        hidden = self.embeddings(
            inputs.input_ids,
            inputs.input_mask,
            inputs.segment_ids,
            inputs.region_features,
            inputs.region_boxes,
            inputs.region_mask,
            masked,
        )  # (B, L+R+1, H)
        end = inputs.input_mask.new_ones((inputs.input_mask.size(0), 1))
        mask = torch.cat([inputs.input_mask, inputs.region_mask, end], dim=1).to(hidden.dtype)
        additive = (1.0 - mask[:, None, None, :]) * torch.finfo(hidden.dtype).min
        out = self.encoder(
            hidden, attention_mask=additive, output_attentions=output_attentions, return_dict=True
        )
        sequence = out.last_hidden_state  # (B, L+R+1, H)
        length, regions = inputs.input_ids.size(1), inputs.region_mask.size(1)
        return Encoded(
            text=sequence[:, :length],
            regions=sequence[:, length : length + regions],
            pooled=pool(self.pooler, sequence, mask, self.pooling),  # (B, H)
            region_mask=inputs.region_mask,
            attentions=out.attentions if output_attentions else None,
        )

    @staticmethod
    def _region_masked(sample_list: Mapping[str, Any], region_mask: torch.Tensor) -> torch.Tensor:
        """``region_masked`` (B, R) of a pre-training batch, zeros otherwise."""
        masked = sample_list.get("region_masked")
        if masked is None:
            return torch.zeros_like(region_mask)
        if masked.shape != region_mask.shape:
            raise ValueError(
                f"vl_bert: 'region_masked' must be (B, R) = "
                f"{tuple(region_mask.shape)}, got {tuple(masked.shape)}"
            )
        return masked
