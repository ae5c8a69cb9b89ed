"""The reference models as systems of the harness: how each pre-trains, fine-tunes on the four
tasks and starts fine-tuning from its pre-trained weights.

- VisualBERT and ViLBERT are MMF's own models; their pre-trained weights load through
  MMF's checkpoint mechanism (``checkpoint.resume_file`` + ``checkpoint.resume_pretrained``
  with the configs' ``pretrained_state_mapping``, encoder and embeddings only).
- VL-BERT, and Aligned VLP (uvla's upper bound, run alongside for the comparison), copy
  the embeddings, encoder and pooler named by ``model_config.<model>.pretrained_checkpoint``.

The study (``uvlp-replicate``) runs them as rows of its Table 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from mmf_uvlp.tasks import TASKS


@dataclass(frozen=True)
class HarnessModel:
    """One model of the harness. ``finetune_config`` holds ``{task}``; ``final_weights``: the file MMF
    writes at the end of pre-training (``<model>_final.pth``); ``weights_model``: None for
    MMF's loading, else the model whose ``pretrained_checkpoint`` takes the weights;
    ``feature_dim_key``: the model config key of the region feature size."""

    key: str
    name: str
    pretrain_config: str
    finetune_config: str
    final_weights: str
    weights_model: Optional[str]
    feature_dim_key: str

    def finetune(self, task: str) -> str:
        """The fine-tuning config of ``task``."""
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
        return self.finetune_config.format(task=task)

    def start_from(self, weights: Optional[Path]) -> List[str]:
        """``mmf_run`` options that start fine-tuning from ``weights`` (None: the BERT init)."""
        if self.weights_model is not None:
            return [f"model_config.{self.weights_model}.pretrained_checkpoint={weights}"]
        if weights is None:
            return []
        return [f"checkpoint.resume_file={weights}", "checkpoint.resume_pretrained=True"]

    def evaluate_from(self, checkpoint: Path) -> List[str]:
        """``mmf_run`` options of an inference run on a fine-tuned ``checkpoint``."""
        options = [f"checkpoint.resume_file={checkpoint}"]
        if self.weights_model is not None:  # the fine-tuned checkpoint has every weight
            options.append(f"model_config.{self.weights_model}.pretrained_checkpoint=None")
        return options

    @property
    def model_section(self) -> str:
        """The ``model_config`` section its settings live in (``visual_bert`` for
        ``model_config.visual_bert.*``), the one of its feature size key."""
        return self.feature_dim_key.split(".")[1]

    def feature_dim(self, dim: int) -> List[str]:
        """``mmf_run`` option setting the region feature size."""
        return [f"{self.feature_dim_key}={dim}"]


_BASELINES = "projects/baselines"
SYSTEMS: Dict[str, HarnessModel] = {
    system.key: system
    for system in (
        HarnessModel(
            "visual_bert",
            "VisualBERT",
            f"{_BASELINES}/visual_bert/pretrain.yaml",
            f"{_BASELINES}/visual_bert/{{task}}.yaml",
            "visual_bert_uvlp_final.pth",
            None,
            "model_config.visual_bert.visual_embedding_dim",
        ),
        HarnessModel(
            "vilbert",
            "ViLBERT",
            f"{_BASELINES}/vilbert/pretrain.yaml",
            f"{_BASELINES}/vilbert/finetune/{{task}}.yaml",
            "vilbert_uvlp_final.pth",
            None,
            "model_config.vilbert.v_feature_size",
        ),
        HarnessModel(
            "vl_bert",
            "VL-BERT",
            f"{_BASELINES}/vl_bert/pretrain.yaml",
            f"{_BASELINES}/vl_bert/finetune/{{task}}.yaml",
            "vl_bert_final.pth",
            "vl_bert",
            "model_config.vl_bert.feature_dim",
        ),
        HarnessModel(
            "aligned_vlp",
            "Aligned VLP",
            f"{_BASELINES}/aligned_vlp/pretrain.yaml",
            "projects/uvla/finetune/{task}.yaml",
            "uvla_final.pth",
            "uvla",
            "model_config.uvla.feature_dim",
        ),
    )
}
REFERENCE_MODELS = ("visual_bert", "vilbert", "vl_bert")
